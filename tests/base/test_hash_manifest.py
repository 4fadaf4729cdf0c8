"""The file-hash manifest (sitecal._hash_manifest): an unchanged file is not read again, a changed one is,
and the hashes always equal those hashlib computes from the bytes."""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sitecal import _hash_manifest
from sitecal._hash_manifest import SETTLE_NS, FileHashes, HashManifest, hash_files
from sitecal.cohort import Cohort, Study
from sitecal.provenance import dataset_manifest_sha256, file_sha256, manifest_sha256
from sitecal.run.stages import file_hashes_of, hashed

KEY = bytes.fromhex("0123456789abcdef" * 4)
OTHER_KEY = bytes.fromhex("fedcba9876543210" * 4)
# folder and file names of the kind a site writes: none of them may appear in the manifest's bytes
NAMES = ["DOE^JANE_19650304/MRN7777777/ACC99999999_a.dcm", "DOE^JANE_19650304/MRN7777777/b.dcm", "c.dcm"]
AN_HOUR_AGO_NS = time.time_ns() - 3600 * 10**9


def _write(path: Path, data: bytes, *, mtime_ns: int = AN_HOUR_AGO_NS) -> Path:
    """A file as a site's archive holds it: written long before the run (older than SETTLE_NS)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, ns=(mtime_ns, mtime_ns))
    return path


@pytest.fixture
def files(tmp_path: Path) -> list[Path]:
    return [_write(tmp_path / "data" / name, os.urandom(1000 + 700 * i)) for i, name in enumerate(NAMES)]


@pytest.fixture
def manifest(tmp_path: Path) -> HashManifest:
    return HashManifest(tmp_path / "out" / ".sitecal-file-hashes.sqlite", KEY)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every file hash_files reads, in order."""
    seen: list[Path] = []
    real = _hash_manifest.file_sha256_and_stat

    def counting(path: str | Path) -> tuple[str, os.stat_result, os.stat_result]:
        seen.append(Path(path))
        return real(path)

    monkeypatch.setattr(_hash_manifest, "file_sha256_and_stat", counting)
    return seen


def _reference(paths: list[Path]) -> dict[Path, str]:
    """sha256 of each file's bytes, by hashlib directly."""
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


def test_second_call_reads_no_file(files: list[Path], manifest: HashManifest, reads: list[Path]) -> None:
    first = hash_files(files, manifest=manifest)
    assert (first.n_hashed, first.n_reused) == (3, 0) and reads == files
    reads.clear()
    second = hash_files(files, manifest=manifest)
    assert reads == []  # not one file opened
    assert (second.n_hashed, second.n_reused) == (0, 3)
    assert dict(second) == dict(first) == _reference(files)
    assert second == {p: file_sha256(p) for p in files}  # FileHashes compares as a mapping


def test_changed_size_or_mtime_is_hashed_again(
    files: list[Path], manifest: HashManifest, reads: list[Path]
) -> None:
    hash_files(files, manifest=manifest)
    _write(files[0], files[0].read_bytes() + b"x")  # size changed, same (old) mtime
    data = bytearray(files[1].read_bytes())
    data[0] ^= 0xFF
    _write(files[1], bytes(data), mtime_ns=AN_HOUR_AGO_NS + 1)  # same size, mtime 1 ns later
    reads.clear()
    again = hash_files(files, manifest=manifest)
    assert reads == files[:2] and (again.n_hashed, again.n_reused) == (2, 1)
    assert dict(again) == _reference(files)
    reads.clear()
    assert hash_files(files, manifest=manifest).n_reused == 3 and reads == []  # the new hashes remembered


def test_replaced_file_with_same_size_and_mtime_is_hashed_again(
    files: list[Path], manifest: HashManifest, reads: list[Path]
) -> None:
    """A new file under the old name (another inode) is not mistaken for the old one."""
    hash_files(files, manifest=manifest)
    data = bytearray(files[2].read_bytes())
    data[-1] ^= 0xFF
    replacement = _write(files[2].with_name("new.tmp"), bytes(data))
    os.link(files[2], files[2].with_name("old.tmp"))  # holds the old inode, so that it is not reused
    os.replace(replacement, files[2])
    reads.clear()
    again = hash_files(files, manifest=manifest)
    assert reads == [files[2]] and dict(again) == _reference(files)


def test_the_resolved_path_is_what_counts(
    files: list[Path],
    manifest: HashManifest,
    reads: list[Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same file through a linked folder, a relative path or a link to it is the same file."""
    hash_files(files, manifest=manifest)
    (tmp_path / "linked").symlink_to(tmp_path / "data")
    (tmp_path / "c-link.dcm").symlink_to(files[2])
    monkeypatch.chdir(tmp_path / "data")
    other_names = [tmp_path / "linked" / NAMES[0], Path(NAMES[1]), tmp_path / "c-link.dcm", files[2]]
    reads.clear()
    again = hash_files(other_names, manifest=manifest)
    assert reads == [] and (again.n_hashed, again.n_reused) == (0, 4)
    assert list(again.values()) == [*_reference(files).values(), _reference(files)[files[2]]]


def test_file_modified_just_now_is_not_remembered(tmp_path: Path, manifest: HashManifest) -> None:
    """Within SETTLE_NS of its mtime a file may still change in the same clock tick: read it each time."""
    fresh = tmp_path / "fresh.dcm"
    fresh.write_bytes(b"being written")
    assert time.time_ns() - fresh.stat().st_mtime_ns < SETTLE_NS
    assert hash_files([fresh], manifest=manifest).n_hashed == 1
    assert hash_files([fresh], manifest=manifest).n_hashed == 1


def test_dataset_manifest_hash_is_unchanged(files: list[Path], manifest: HashManifest) -> None:
    uids = [f"1.2.826.0.1.{i}" for i in range(len(files))]
    expected = dataset_manifest_sha256(zip(uids, files, strict=True))  # as every run computed it before
    for _ in range(2):  # hashed, then taken from the manifest
        hashes = hash_files(files, manifest=manifest)
        assert manifest_sha256((uid, hashes[p]) for uid, p in zip(uids, files, strict=True)) == expected


def test_file_hashes_of_a_cohort(files: list[Path], manifest: HashManifest, reads: list[Path]) -> None:
    study = Study(
        study_key="S-1",
        patient_key="P-1",
        files=(files[0], files[1]),
        relative_path="F-0",
        instance_uids=("1.2.3.4.1", "1.2.3.4.2"),
        attributes={},
        label=0,
    )
    cohort = Cohort(
        studies=(study,), exclusions=(), files_found=2, dicom_instances=2, n_studies_found=1, n_labelled=1
    )
    without = file_hashes_of(cohort, progress=False)
    assert isinstance(without, FileHashes) and (without.n_hashed, without.n_reused) == (2, 0)
    file_hashes_of(cohort, progress=False, manifest=manifest)
    reads.clear()
    remembered = file_hashes_of(cohort, progress=False, manifest=manifest)
    assert reads == [] and (remembered.n_hashed, remembered.n_reused) == (0, 2)
    assert hashed(study, remembered) == hashed(study, without)


def test_another_key_reuses_nothing(files: list[Path], manifest: HashManifest, reads: list[Path]) -> None:
    hash_files(files, manifest=manifest)
    reads.clear()
    other = hash_files(files, manifest=HashManifest(manifest.path, OTHER_KEY))
    assert (other.n_hashed, other.n_reused) == (3, 0) and reads == files
    assert dict(other) == _reference(files)


def test_no_path_or_hash_in_clear(files: list[Path], manifest: HashManifest, tmp_path: Path) -> None:
    hash_files(files, manifest=manifest)
    data = manifest.path.read_bytes()
    parts = {part for name in NAMES for part in name.split("/")}
    for text in [*parts, str(tmp_path), "/data/", "JANE", "7777777", "ACC99999999", ".dcm"]:
        assert text.encode() not in data and text.encode("utf-16-le") not in data, text
    for sha in _reference(files).values():  # neither as hex nor as raw bytes
        assert sha.encode() not in data and bytes.fromhex(sha) not in data


def test_corrupt_manifest_is_a_warning_and_replaced(
    files: list[Path], manifest: HashManifest, reads: list[Path], caplog: pytest.LogCaptureFixture
) -> None:
    hash_files(files, manifest=manifest)
    manifest.path.write_bytes(b"this is no database, " * 300)
    reads.clear()
    with caplog.at_level(logging.WARNING, logger="sitecal"):
        hashes = hash_files(files, manifest=manifest)
    assert dict(hashes) == _reference(files) and hashes.n_hashed == 3 and reads == files
    [record] = [r for r in caplog.records if r.levelno == logging.WARNING]
    message = record.getMessage()
    assert str(manifest.path) in message and "damaged" in message and "replaced" in message
    assert not any(part in message for part in ("DOE", "MRN", "c.dcm"))
    reads.clear()
    assert hash_files(files, manifest=manifest).n_reused == 3 and reads == []  # rebuilt


def test_damaged_page_in_a_valid_header_is_replaced(
    files: list[Path], manifest: HashManifest, caplog: pytest.LogCaptureFixture
) -> None:
    """A file whose SQLite header reads but whose table pages are garbage is replaced too."""
    hash_files(files, manifest=manifest)
    data = bytearray(manifest.path.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    data[page:] = b"\xff" * (len(data) - page)  # every page after the first (the schema) is garbage
    manifest.path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="sitecal"):
        hashes = hash_files(files, manifest=manifest)
    assert dict(hashes) == _reference(files)
    assert any("damaged" in r.getMessage() for r in caplog.records)


def test_altered_row_is_not_trusted(
    files: list[Path], manifest: HashManifest, caplog: pytest.LogCaptureFixture
) -> None:
    hash_files(files, manifest=manifest)
    with sqlite3.connect(manifest.path) as connection:
        connection.execute("UPDATE file_hashes SET sha256 = zeroblob(32)")
    connection.close()
    with caplog.at_level(logging.WARNING, logger="sitecal"):
        hashes = hash_files(files, manifest=manifest)
    assert dict(hashes) == _reference(files) and hashes.n_hashed == 3
    assert any("3 entries failed their check" in r.getMessage() for r in caplog.records)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="needs POSIX permissions, not root")
def test_read_only_location_is_a_warning(
    files: list[Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        with caplog.at_level(logging.WARNING, logger="sitecal"):
            hashes = hash_files(files, manifest=HashManifest(locked / "m.sqlite", KEY))
    finally:
        locked.chmod(0o755)
    assert dict(hashes) == _reference(files)
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert "m.sqlite" in caplog.records[0].getMessage()


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="needs POSIX permissions, not root")
def test_read_only_manifest_is_still_read(
    files: list[Path], manifest: HashManifest, reads: list[Path], caplog: pytest.LogCaptureFixture
) -> None:
    hash_files(files[:2], manifest=manifest)
    manifest.path.chmod(0o444)
    reads.clear()
    try:
        with caplog.at_level(logging.WARNING, logger="sitecal"):
            hashes = hash_files(files, manifest=manifest)
    finally:
        manifest.path.chmod(0o644)
    assert (hashes.n_reused, hashes.n_hashed) == (2, 1) and reads == [files[2]]
    assert dict(hashes) == _reference(files)
    [record] = caplog.records
    assert "cannot write" in record.getMessage()


def test_uncreatable_location_is_a_warning(
    files: list[Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """As root too: a folder that cannot be made (a file stands in the way)."""
    (tmp_path / "blocked").write_text("")
    with caplog.at_level(logging.WARNING, logger="sitecal"):
        hashes = hash_files(files, manifest=HashManifest(tmp_path / "blocked" / "m.sqlite", KEY))
    assert dict(hashes) == _reference(files) and hashes.n_hashed == 3
    [record] = caplog.records
    assert record.levelno == logging.WARNING and "m.sqlite: cannot open it" in record.getMessage()


def test_manifest_opened_read_only_is_still_read(
    files: list[Path],
    manifest: HashManifest,
    reads: list[Path],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As root too: SQLite opens a file it may not write read-only; here it is made to."""
    hash_files(files[:2], manifest=manifest)
    real = sqlite3.connect

    def read_only(path: Path, **kwargs: object) -> sqlite3.Connection:
        return real(f"file:{path}?mode=ro", uri=True, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(_hash_manifest.sqlite3, "connect", read_only)
    reads.clear()
    with caplog.at_level(logging.WARNING, logger="sitecal"):
        hashes = hash_files(files, manifest=manifest)
    monkeypatch.undo()
    assert (hashes.n_reused, hashes.n_hashed) == (2, 1) and reads == [files[2]]
    assert dict(hashes) == _reference(files)
    [record] = caplog.records
    assert "cannot write to it (attempt to write a readonly database)" in record.getMessage()


def test_foreign_database_is_left_alone(
    files: list[Path], manifest: HashManifest, caplog: pytest.LogCaptureFixture
) -> None:
    manifest.path.parent.mkdir(parents=True)
    with sqlite3.connect(manifest.path) as connection:
        connection.execute("CREATE TABLE theirs (x)")
    connection.close()
    with caplog.at_level(logging.WARNING, logger="sitecal"):
        hashes = hash_files(files, manifest=manifest)
    assert dict(hashes) == _reference(files)
    assert "not a sitecal file-hash manifest" in caplog.records[0].getMessage()
    with sqlite3.connect(manifest.path) as connection:
        assert connection.execute("SELECT name FROM sqlite_master").fetchall() == [("theirs",)]
    connection.close()


def test_unreadable_file_raises_as_before(tmp_path: Path, manifest: HashManifest) -> None:
    with pytest.raises(FileNotFoundError):
        hash_files([tmp_path / "gone.dcm"], manifest=manifest)
    with pytest.raises(FileNotFoundError):
        file_sha256(tmp_path / "gone.dcm")


# One run writing into the manifest: a separate interpreter, as three per-site runs are; small batches so
# that the two runs' writes interleave.
_WRITER = """
import sys
from pathlib import Path
from sitecal import _hash_manifest as hm
hm._WRITE_ROWS, hm._LOOKUP_BATCH = 5, 7
manifest, folder, names = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3].split(",")
for _ in range(3):
    hm.hash_files([folder / n for n in names], manifest=hm.HashManifest(manifest, KEY))
"""


def test_concurrent_writers(tmp_path: Path, manifest: HashManifest) -> None:
    """Two processes filling one manifest at once, overlapping on 40 files, leave it whole and complete."""
    names = [f"f{i:03d}.dcm" for i in range(120)]
    paths = [_write(tmp_path / "d" / n, os.urandom(64 + i)) for i, n in enumerate(names)]
    script = f"KEY = bytes.fromhex({KEY.hex()!r})\n" + _WRITER
    halves = [names[:80], names[40:]]  # both write rows 40-79
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(manifest.path), str(tmp_path / "d"), ",".join(half)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for half in halves
    ]
    errors = [w.communicate(timeout=120)[1] for w in writers]
    assert [w.returncode for w in writers] == [0, 0], errors
    assert errors == ["", ""]  # no warning (a lock waited out too long), no traceback
    with sqlite3.connect(manifest.path) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert connection.execute("SELECT count(*) FROM file_hashes").fetchone() == (120,)
    connection.close()
    hashes = hash_files(paths, manifest=manifest)
    assert (hashes.n_hashed, hashes.n_reused) == (0, 120) and dict(hashes) == _reference(paths)


@pytest.mark.slow
def test_second_run_hashes_no_file_and_names_the_same_data(tmp_path: Path) -> None:
    """Two `sitecal run` of one cohort: the second reads no file to hash, and the dataset manifest hash
    it records is the first's (the same files, the same definition)."""
    import json

    from tests.conftest import assert_exit_is_the_verdicts, write_demo_protocol

    from sitecal.cli import main
    from sitecal.demo import generate_demo

    cohort = generate_demo(tmp_path / "data", n_studies=40, seed=18)
    for path in cohort.dicom_dir.rglob("*"):  # written long ago, as an archive's files are
        os.utime(path, ns=(AN_HOUR_AGO_NS, AN_HOUR_AGO_NS))
    protocol = write_demo_protocol(
        tmp_path, cohort, n_resamples=50, calibration={"min_group_size": 10}, inputs={"num_workers": 0}
    )
    provenance = []
    for _ in range(2):
        code = main(["run", str(protocol), "--no-progress", "--workers", "1"])
        folder = max((tmp_path / "reports").glob("demo-*"))
        assert_exit_is_the_verdicts(code, folder)
        provenance.append(json.loads((folder / "provenance.json").read_text()))
        assert "file hashes: " in (folder / "run.log").read_text()
    first, second = (p["file_hashes"] for p in provenance)
    assert first["reused"] == 0 and first["hashed"] > 30
    assert second == {"hashed": 0, "reused": first["hashed"]}
    assert provenance[0]["sha256"]["dataset_manifest"] == provenance[1]["sha256"]["dataset_manifest"]
    assert (tmp_path / "reports" / ".sitecal-file-hashes.sqlite").is_file()
