"""What git tracks: no DICOM file outside the tests' fixtures and the package, and nothing a command wrote.

A demo cohort (``demo-data/``, or ``sitecal-demo/`` that ``sitecal demo`` writes in a working folder) is
hundreds of generated DICOM files, and a run folder (``reports/<name>-<UTC time>/``, or any folder holding
the run's ``seal.json``) is a run's output; ``.gitignore`` leaves them out, and this test fails naming any
that was committed all the same. A DICOM file is known by its ``.dcm`` extension or, without it, by the
``DICM`` magic at byte 128 (the first 132 bytes are read, no more). DICOM files may live in the tests'
fixture folders (a ``fixtures`` or ``data`` folder under ``tests/``) and in the package (``src/sitecal/``,
data it ships).
"""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: The DICOM file format's magic (PS3.10 7.1): 128 bytes of preamble, then "DICM".
DICOM_MAGIC = b"DICM"
MAGIC_AT = 128

#: Folders a demo cohort is generated into (in whichever folder the command ran): never tracked.
GENERATED_FOLDERS = ("demo-data", "sitecal-demo")
#: Where run folders are written (the protocol's default ``report.output_dir``, beside the protocol or
#: the repository's ``reports/``): only the repository's placeholder is kept.
RUNS_FOLDER = "reports"
KEPT_IN_RUNS_FOLDER = frozenset({"reports/.gitkeep"})
#: A run folder's seal (``sitecal._seal.SEAL``): the folder holding it was written by a run.
RUN_FOLDER_MARK = "seal.json"
#: Folders under ``tests/`` that hold the tests' fixtures.
FIXTURE_FOLDERS = frozenset({"fixtures", "data"})


def tracked_files(root: Path) -> list[str] | None:
    """The paths git tracks under ``root`` (POSIX, relative), or None when ``root`` is no git checkout."""
    git = shutil.which("git")
    if git is None:
        return None
    found = subprocess.run(
        [git, "-C", str(root), "ls-files", "-z"], capture_output=True, check=False, timeout=60
    )
    if found.returncode != 0:
        return None
    return [name for name in found.stdout.decode("utf-8", "surrogateescape").split("\0") if name]


def is_dicom(path: Path) -> bool:
    """Whether the file at ``path`` is a DICOM file: its ``.dcm`` extension, or the magic at byte 128."""
    if path.suffix.lower() == ".dcm":
        return True
    if path.is_symlink() or not path.is_file():
        return False  # a link, a submodule or a file deleted but not yet committed: nothing to read
    try:
        with path.open("rb") as fh:
            head = fh.read(MAGIC_AT + len(DICOM_MAGIC))
    except OSError:
        return False
    return head[MAGIC_AT:] == DICOM_MAGIC


def dicom_allowed(name: str) -> bool:
    """Whether a DICOM file may be tracked at ``name``: in a tests' fixture folder or in the package."""
    parts = PurePosixPath(name).parts
    if parts[:1] == ("tests",):
        return any(part in FIXTURE_FOLDERS for part in parts[1:-1])
    return parts[:2] == ("src", "sitecal")


def generated_by(name: str, names: frozenset[str]) -> str | None:
    """What wrote the tracked file ``name`` if a command did (a demo cohort, a run), else None.

    ``names`` are all the tracked paths: a file is part of a run folder if its folder, or a folder above
    it, holds a tracked ``seal.json``.
    """
    path = PurePosixPath(name)
    for i, part in enumerate(path.parts[:-1]):
        here = "/".join(path.parts[: i + 1])
        if part in GENERATED_FOLDERS:
            return f"a generated demo cohort ({here}/)"
        if part == RUNS_FOLDER and name not in KEPT_IN_RUNS_FOLDER:
            return f"a run folder ({here}/)"
    for folder in path.parents:
        if str(folder / RUN_FOLDER_MARK) in names and folder != PurePosixPath("."):
            return f"a run folder ({folder}/ holds {RUN_FOLDER_MARK})"
    return None


def tracked_problems(names: Iterable[str], root: Path) -> list[str]:
    """One line for each tracked file that should not be: generated output, or a DICOM file out of place."""
    listed = list(names)
    every = frozenset(listed)
    problems = []
    for name in listed:
        made = generated_by(name, every)
        if made is not None:
            problems.append(f"{name}: part of {made}")
        elif not dicom_allowed(name) and is_dicom(root / name):
            problems.append(f"{name}: a DICOM file outside the tests' fixtures and the package")
    return problems


def test_git_tracks_no_generated_cohort_run_folder_or_stray_dicom_file() -> None:
    names = tracked_files(ROOT)
    if names is None:
        pytest.skip(f"{ROOT} is not a git checkout (or git is not installed): nothing to check")
    problems = tracked_problems(names, ROOT)
    assert not problems, (
        "git tracks files that must not be committed (git rm --cached them; .gitignore leaves them out):\n"
        + "\n".join(problems)
    )


def test_the_check_finds_each_kind_of_tracked_file_it_forbids(tmp_path: Path) -> None:
    # a DICOM file without the extension, found by its magic, and a file with the magic elsewhere
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "IM0001").write_bytes(b"\0" * MAGIC_AT + DICOM_MAGIC + b"\2\0\0\0")
    (tmp_path / "notes" / "short.txt").write_bytes(b"DICM")
    (tmp_path / "notes" / "late.bin").write_bytes(b"\0" * (MAGIC_AT + 1) + DICOM_MAGIC)
    names = [
        "notes/IM0001",
        "notes/short.txt",
        "notes/late.bin",
        "examples/scan.DCM",
        "demo-data/dicom/s1/i1.dcm",
        "sitecal-demo/labels.csv",
        "reports/.gitkeep",
        "reports/demo-20261202T180000Z/evaluation.json",
        "protocols/reports/.sitecal-pseudonym-key",
        "examples/sitecal-demo/demo.yaml",
        "archive/run-1/seal.json",
        "archive/run-1/tables/studies.csv",
        "tests/cohort/fixtures/ct/slice.dcm",
        "tests/e2e/data/one.dcm",
        "src/sitecal/demo/template.dcm",
    ]
    assert tracked_problems(names, tmp_path) == [
        "notes/IM0001: a DICOM file outside the tests' fixtures and the package",
        "examples/scan.DCM: a DICOM file outside the tests' fixtures and the package",
        "demo-data/dicom/s1/i1.dcm: part of a generated demo cohort (demo-data/)",
        "sitecal-demo/labels.csv: part of a generated demo cohort (sitecal-demo/)",
        "reports/demo-20261202T180000Z/evaluation.json: part of a run folder (reports/)",
        "protocols/reports/.sitecal-pseudonym-key: part of a run folder (protocols/reports/)",
        "examples/sitecal-demo/demo.yaml: part of a generated demo cohort (examples/sitecal-demo/)",
        "archive/run-1/seal.json: part of a run folder (archive/run-1/ holds seal.json)",
        "archive/run-1/tables/studies.csv: part of a run folder (archive/run-1/ holds seal.json)",
    ]


def test_a_dicom_file_in_the_tests_is_allowed_only_in_a_fixture_folder() -> None:
    assert dicom_allowed("tests/pacs/fixtures/a.dcm") and dicom_allowed("tests/e2e/data/ct/b.dcm")
    assert not dicom_allowed("tests/pacs/a.dcm") and not dicom_allowed("tests/fixtures.dcm")
    assert not dicom_allowed("docs/src/sitecal/a.dcm")


def test_git_ignores_the_generated_folders() -> None:
    if tracked_files(ROOT) is None:
        pytest.skip(f"{ROOT} is not a git checkout (or git is not installed): nothing to check")
    git = shutil.which("git")
    assert git is not None
    probes = [
        "demo-data/dicom/a.dcm",
        "sitecal-demo/labels.csv",
        "examples/sitecal-demo/ct/s1/i1.dcm",
        "reports/demo-20261202T180000Z/seal.json",
        "protocols/reports/.sitecal-pseudonym-key",
    ]
    found = subprocess.run(
        [git, "-C", str(ROOT), "check-ignore", "--no-index", *probes],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert found.stdout.split() == probes
    kept = subprocess.run(
        [git, "-C", str(ROOT), "check-ignore", "--no-index", "reports/.gitkeep"],
        capture_output=True,
        check=False,
        timeout=60,
    )
    assert kept.returncode == 1  # not ignored


def test_no_two_test_files_share_a_name() -> None:
    """Pytest imports test files by their base name (no package __init__): two alike collide at collection."""
    names = Counter(path.name for path in Path(__file__).parent.rglob("test_*.py"))
    assert not [name for name, count in names.items() if count > 1]
