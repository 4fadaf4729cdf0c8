"""A sealed run folder: every command that reads one verifies it first and refuses an edited, missing or added
file, naming it; an interrupted run is marked incomplete; nothing is rendered, deployed or sent that the run
did not validate."""

from __future__ import annotations

import csv
import hashlib
import hmac
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.conftest import REPO, TEST_PSEUDONYM_KEY

from sitecal._seal import COMPLETE, EVALUATED, INCOMPLETE, SEAL, write_seal
from sitecal.cli import main

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

KEY = TEST_PSEUDONYM_KEY.encode()


@pytest.fixture(scope="module")
def sealed(small_run: dict) -> dict:
    """The shared small run (tests.conftest.small_run), and a scores file for `sitecal apply`."""
    folder = small_run["folder"]
    scores = small_run["root"] / "scores.csv"
    with (folder / "predictions.csv").open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))[:5]
    columns = [c for c in rows[0] if c.startswith("logit:")]
    with scores.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["scanner", *columns])
        writer.writerows(["DRX Demo", *[r[c] for c in columns]] for r in rows)
    return {**small_run, "scores": scores}


def _copy(sealed: dict, tmp_path: Path) -> Path:
    """A copy of the run folder to spoil (its protocol's key and output paths are absolute)."""
    return Path(shutil.copytree(sealed["folder"], tmp_path / sealed["folder"].name))


def _commands(sealed: dict, folder: Path, tmp_path: Path) -> dict[str, list[str]]:
    """Every command that reads a run folder, each as the CLI is called."""
    return {
        "report": ["report", str(folder)],
        "export": ["export", str(folder), "--format", "torchscript", "--no-progress"],
        "apply": ["apply", str(folder / "calibration.json"), str(sealed["scores"]), "--output",
                  str(tmp_path / "applied.csv")],
        "send": ["send", str(folder)],
        "plan": ["plan", str(sealed["protocol"]), "--from-run", str(folder), "--no-progress",
                 "--simulations", "20", "--sizes", "50"],
    }  # fmt: skip


def _flip(path: Path) -> bytes:
    """Change one byte in the middle of ``path``; the original bytes."""
    data = path.read_bytes()
    middle = len(data) // 2
    path.write_bytes(data[:middle] + bytes([data[middle] ^ 0x01]) + data[middle + 1 :])
    return data


def test_a_run_seals_every_file_it_wrote_under_its_key_and_the_seal_checks_by_hand(sealed: dict) -> None:
    folder = sealed["folder"]
    seal = json.loads((folder / SEAL).read_text())
    assert not (folder / INCOMPLETE).exists() and seal["state"] == COMPLETE
    written = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    assert set(seal["files"]) == written - {SEAL, "run.log"}
    assert {"calibration.json", "evaluation.json", "report.pdf", "report.dcm", "predictions.csv"} <= set(
        seal["files"]
    )
    # the recipe of sitecal._seal's docstring, computed here with hmac and hashlib alone
    mac = seal.pop("mac")
    body = json.dumps(seal, sort_keys=True, separators=(",", ":")).encode()
    seal_key = hmac.digest(KEY, b"sitecal run-folder seal v1", "sha256")
    assert hmac.compare_digest(hmac.digest(seal_key, body, "sha256").hex(), mac)
    for name, digest in seal["files"].items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest
        assert (folder / name).stat().st_size == seal["sizes"][name]
    log = seal["growing"]["run.log"]
    assert hashlib.sha256((folder / "run.log").read_bytes()[: log["bytes"]]).hexdigest() == log["sha256"]
    assert "results sealed (seal.json" in (folder / "run.log").read_text()


def test_one_edited_byte_in_any_file_makes_every_command_exit_2_naming_it(
    sealed: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _copy(sealed, tmp_path)
    names = [*json.loads((folder / SEAL).read_text())["files"], SEAL, "run.log"]
    for name in names:
        path = folder / name
        original = _flip(path) if name != "run.log" else _flip_log(path)
        for command, args in _commands(sealed, folder, tmp_path).items():
            assert main(args) == 2, (name, command)
            err = capsys.readouterr().err
            assert f"{path}: " in err or f"{folder.name}/{name}: " in err, (name, command, err)
        path.write_bytes(original)
    assert not (tmp_path / "applied.csv").exists() and not (folder / "export").exists()
    assert not (folder / "sent.json").exists()


def _flip_log(path: Path) -> bytes:
    """run.log is sealed by its first bytes: edit one of those (an appended line is allowed)."""
    data = path.read_bytes()
    path.write_bytes(bytes([data[0] ^ 0x01]) + data[1:])
    return data


def test_the_unedited_folder_works_as_before(
    sealed: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _copy(sealed, tmp_path)
    before = {name: (folder / name).read_bytes() for name in ("report.pdf", "evaluation.json")}
    commands = _commands(sealed, folder, tmp_path)
    assert main(commands["report"]) == 0
    assert {name: (folder / name).read_bytes() for name in before} == before
    assert main(commands["apply"]) == 0
    with (tmp_path / "applied.csv").open(encoding="utf-8") as fh:
        assert {r["calibration_check"] for r in csv.DictReader(fh)} == {"sealed"}
    assert main(commands["plan"]) == 0
    capsys.readouterr()
    # send verifies the folder, then finds no destination in this protocol: that is its only complaint
    assert main(commands["send"]) == 2
    assert "report.send_to is not set" in capsys.readouterr().err
    # lines appended to run.log after the seal (export, send) keep the folder valid
    with (folder / "run.log").open("a", encoding="utf-8") as fh:
        fh.write("a later command's line\n")
    assert main(commands["report"]) == 0


def test_an_added_or_missing_file_or_a_link_is_refused_naming_it(
    sealed: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _copy(sealed, tmp_path)
    commands = _commands(sealed, folder, tmp_path)
    for added in (folder / "notes.txt", folder / "figures" / "extra.png"):
        added.write_bytes(b"planted")
        for args in commands.values():
            assert main(args) == 2
            assert f"{added}: not in the run's seal: added to the folder after the run" in (
                capsys.readouterr().err
            )
        added.unlink()
    (folder / "exclusions.csv").rename(tmp_path / "exclusions.csv")
    assert main(commands["export"]) == 2
    assert f"{folder / 'exclusions.csv'}: missing (it is in the run's seal)" in capsys.readouterr().err
    (tmp_path / "exclusions.csv").rename(folder / "exclusions.csv")
    os.symlink("/etc/passwd", folder / "passwd")
    assert main(commands["report"]) == 2
    assert f"{folder / 'passwd'}: a link or special file in a run folder" in capsys.readouterr().err


def test_a_sealed_file_swapped_for_a_huge_one_is_refused_without_reading_it(
    sealed: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _copy(sealed, tmp_path)
    with (folder / "predictions.csv").open("r+b") as fh:
        fh.truncate(64 << 30)  # 64 GiB, sparse: reading it would take minutes
    started = time.monotonic()
    assert main(["report", str(folder)]) == 2
    assert time.monotonic() - started < 10
    assert f"{folder / 'predictions.csv'}: edited after the run sealed it" in capsys.readouterr().err


def test_a_seal_under_another_key_or_no_key_at_hand_is_refused(
    sealed: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _copy(sealed, tmp_path)
    other = tmp_path / "other-key"
    other.write_text("f" * 64 + "\n")
    other.chmod(0o600)
    assert main(["report", str(folder), "--key", str(other)]) == 2
    err = capsys.readouterr().err
    assert "no key at hand has it" in err and "Pass --key with the site key the run used" in err
    # the right key, named explicitly, is taken
    key = tmp_path / "site-key"
    key.write_text(TEST_PSEUDONYM_KEY + "\n")
    key.chmod(0o600)
    assert main(["report", str(folder), "--key", str(key)]) == 0


def test_a_verdict_its_own_criteria_do_not_give_is_refused_even_under_a_valid_seal(
    sealed: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _copy(sealed, tmp_path)
    evaluation = json.loads((folder / "evaluation.json").read_text())
    assert evaluation["verdict"] != "pass"
    evaluation["verdict"] = "pass"
    (folder / "evaluation.json").write_text(json.dumps(evaluation, indent=2, sort_keys=True) + "\n")
    write_seal(folder, KEY, state=COMPLETE)  # as a faulty sitecal, or someone holding the key, would
    pdf = (folder / "report.pdf").read_bytes()
    assert main(["report", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "evaluation.json: its verdicts are not those its own numbers give" in err
    assert "$.verdict: 'pass', but its criteria give" in err
    assert (folder / "report.pdf").read_bytes() == pdf  # nothing rendered over it


def test_send_sends_only_the_runs_own_encapsulated_pdf(
    sealed: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _copy(sealed, tmp_path)
    image = next(Path(sealed["manifest"].dicom_dir).rglob("*.dcm"))
    shutil.copyfile(image, folder / "report.dcm")  # a patient image where the report was
    write_seal(folder, KEY, state=COMPLETE)
    assert main(["send", str(folder)]) == 2
    assert "report.dcm: not the Encapsulated PDF of this run's report.pdf; only that is sent" in (
        capsys.readouterr().err
    )
    assert not (folder / "sent.json").exists()


def test_apply_takes_an_unverifiable_calibration_only_when_told_and_says_so(
    sealed: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outside = tmp_path / "vendor" / "calibration.json"
    outside.parent.mkdir()
    shutil.copyfile(sealed["folder"] / "calibration.json", outside)
    out = tmp_path / "out.csv"
    args = ["apply", str(outside), str(sealed["scores"]), "--output", str(out)]
    assert main(args) == 2
    assert f"{outside}: not in a sealed run folder" in capsys.readouterr().err
    assert main([*args, "--unverified"]) == 0
    assert "used unverified" in capsys.readouterr().err
    with out.open(encoding="utf-8") as fh:
        assert {r["calibration_check"] for r in csv.DictReader(fh)} == {"unverified"}
    # an existing output is replaced only with --force
    before = out.read_bytes()
    assert main([*args, "--unverified"]) == 2
    assert f"{out}: exists. Name another --output, or pass --force" in capsys.readouterr().err
    assert out.read_bytes() == before
    assert main([*args, "--unverified", "--force"]) == 0
    # a temperature no fit gives (T = 1e-300: one-hot output) is refused even unverified
    document = json.loads(outside.read_text())
    document["global_fit"]["temperature"] = 1e-300
    outside.write_text(json.dumps(document))
    assert main([*args, "--unverified", "--force"]) == 2
    assert "temperature 1e-300 outside the range every fit keeps to, [0.05, 100]" in capsys.readouterr().err


def test_a_result_edited_while_the_report_renders_is_never_sealed(
    sealed: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import sitecal.run.stages

    folder = _copy(sealed, tmp_path)
    render = sitecal.run.stages.render_stored

    def render_then_edit(where: Path) -> Path:
        pdf = render(where)
        _flip(where / "calibration.json")  # as a concurrent writer would, while the report is drawn
        return pdf

    monkeypatch.setattr(sitecal.run.stages, "render_stored", render_then_edit)
    assert main(["report", str(folder)]) == 2
    assert f"{folder / 'calibration.json'}: edited after the run sealed it" in capsys.readouterr().err
    assert json.loads((folder / SEAL).read_text())["state"] == EVALUATED  # no complete seal over it
    assert "rendered again ('sitecal report') and did not finish" in (folder / INCOMPLETE).read_text()
    monkeypatch.undo()
    assert main(_commands(sealed, folder, tmp_path)["export"]) == 2


def test_an_evaluated_folder_is_incomplete_until_report_finishes_it(
    sealed: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run killed while rendering: its results sealed, its report not."""
    folder = _copy(sealed, tmp_path)
    (folder / "report.dcm").unlink()
    (folder / INCOMPLETE).write_text("killed while rendering\n")
    write_seal(folder, KEY, state=EVALUATED)
    commands = _commands(sealed, folder, tmp_path)
    for name in ("export", "apply", "send", "plan"):
        assert main(commands[name]) == 2
        assert (
            f"{folder}: an incomplete run folder (its results are sealed but its report was not finished"
            in (capsys.readouterr().err)
        )
    assert main(commands["report"]) == 0
    assert not (folder / INCOMPLETE).exists()
    assert json.loads((folder / SEAL).read_text())["state"] == COMPLETE
    assert main(commands["apply"]) == 0


def test_sigterm_marks_the_run_incomplete_with_a_run_log_line_and_every_command_refuses_it(
    sealed: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = sealed["root"]
    before = set((root / "reports").glob("demo-*"))
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sitecal.cli",
            "run",
            str(sealed["protocol"]),
            "--no-progress",
            "--workers",
            "1",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    folder = None
    while time.monotonic() < deadline:  # until the run has started logging in its folder
        new = set((root / "reports").glob("demo-*")) - before
        log = next(iter(new)) / "run.log" if new else None  # the folder is made before its log
        if log is not None and log.is_file() and "protocol demo" in log.read_text(errors="replace"):
            folder = log.parent
            break
        time.sleep(0.05)
    assert folder is not None
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=120)
    try:
        assert child.returncode == 143, err
        assert "sitecal: terminated (SIGTERM)" in err
        assert (
            "run interrupted (SIGTERM); the folder is marked incomplete" in (folder / "run.log").read_text()
        )
        assert "the run was interrupted (SIGTERM)" in (folder / INCOMPLETE).read_text()
        assert not (folder / SEAL).exists()
        for args in _commands(sealed, folder, tmp_path).values():
            assert main(args) == 2
            assert f"{folder}: an incomplete run folder (the run was interrupted or failed" in (
                capsys.readouterr().err
            )
    finally:
        shutil.rmtree(folder)  # the fixture's other tests see one run folder in reports/
