"""Exit codes that cannot be confused, and `check` refusing what `run` would refuse, before any long work."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from tests.conftest import DEMO_PROTOCOL

import sitecal.run
import sitecal.run.stages
from sitecal.cli import main


def _protocol(tmp_path: Path, **changes: dict) -> Path:
    """The demo protocol pointed at a DICOM folder of one (not DICOM) file and a one-row labels file."""
    (tmp_path / "dicom").mkdir(exist_ok=True)
    (tmp_path / "dicom" / "IM0001").write_bytes(b"not yet exported")
    labels = tmp_path / "labels.csv"
    if not labels.exists():
        labels.write_text("StudyInstanceUID,label\n1.2.3.4,nodule\n")
    protocol = yaml.safe_load(DEMO_PROTOCOL.read_text())
    protocol["data"].update(dicom_dir="dicom", labels="labels.csv")
    protocol["report"]["output_dir"] = "reports"
    protocol["privacy"] = {"key_file": "key"}  # created by the first run
    for section, values in changes.items():
        protocol[section].update(values)
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(protocol, sort_keys=False))
    return path


@pytest.mark.timeout(60)
def test_a_crash_in_a_run_exits_4_with_one_line_and_the_traceback_in_run_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise TypeError("unsupported operand in a stage")

    monkeypatch.setattr(sitecal.run.stages, "scan_folder", broken)
    assert main(["run", str(_protocol(tmp_path)), "--no-progress"]) == 4
    err = capsys.readouterr().err
    assert err.startswith("sitecal: internal error (TypeError: unsupported operand in a stage).")
    assert "Traceback" not in err
    (run_log,) = (tmp_path / "reports").glob("demo-*/run.log")
    assert f"The run log is {run_log}." in err
    log = run_log.read_text()
    assert "run failed, nothing was judged: TypeError: unsupported operand in a stage" in log
    assert "Traceback (most recent call last)" in log and "def broken" not in err


@pytest.mark.timeout(60)
def test_a_crash_in_check_exits_4_and_writes_the_traceback_to_a_private_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sitecal.run.preflight

    def broken(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(sitecal.run.preflight, "check_device", broken)
    assert main(["check", str(_protocol(tmp_path))]) == 4
    err = capsys.readouterr().err
    assert err.startswith("sitecal: internal error (ZeroDivisionError: division by zero).")
    log = Path(err.split("The traceback is in ")[1].strip().rstrip("."))
    assert "Traceback (most recent call last)" in log.read_text()
    assert log.stat().st_mode & 0o077 == 0
    log.unlink()


@pytest.mark.timeout(120)
def test_bad_input_in_a_run_exits_2_and_is_recorded_in_run_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sitecal.demo import generate_demo

    manifest = generate_demo(tmp_path / "demo", n_studies=12, seed=3)
    (tmp_path / "labels.csv").write_text("StudyInstanceUID,label\n9.9.9.9,nodule\n")
    protocol = _protocol(tmp_path, data={"dicom_dir": str(manifest.dicom_dir)})
    assert main(["run", str(protocol), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "no study could be analysed" in err
    assert "check data.key and data.key_column" in err
    (folder,) = (tmp_path / "reports").glob("demo-*")
    assert f"The run log is {folder / 'run.log'}." in err
    assert "run failed, nothing was judged: DataError" in (folder / "run.log").read_text()
    assert (folder / "exclusions.csv").read_text().count("label matches no study") == 1


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("device", "message"),
    [
        ("gpu", "--device: 'gpu' is not a torch device. Use cpu, cuda, cuda:N or mps."),
        ("cuda", "--device: 'cuda': this PyTorch build has no CUDA support (a CPU build)."),
    ],
)
def test_an_unusable_device_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], device: str, message: str
) -> None:
    import torch

    if device == "cuda" and torch.version.cuda is not None:
        message = "--device: 'cuda': no CUDA GPU is visible" if not torch.cuda.is_available() else ""
    if not message:
        pytest.skip("this machine has a usable CUDA GPU")
    protocol = str(_protocol(tmp_path))
    for argv in (
        ["check", protocol, "--device", device],
        ["run", protocol, "--device", device, "--no-progress"],
    ):
        assert main(argv) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "reports").exists()  # refused before a run folder was made


@pytest.mark.timeout(60)
def test_output_outside_the_protocol_tree_is_refused_unless_allowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "site" / "protocols"
    project.mkdir(parents=True)
    monkeypatch.chdir(project)
    protocol = _protocol(project, report={"output_dir": "../../../elsewhere"})
    assert main(["check", str(protocol)]) == 2
    err = capsys.readouterr().err
    assert "report.output_dir:" in err and "is outside the protocol's folder" in err
    assert "--allow-output-anywhere" in err
    assert main(["check", str(protocol), "--allow-output-anywhere"]) == 0


@pytest.mark.timeout(60)
def test_output_dir_that_is_a_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "reports").write_text("a file")
    assert main(["check", str(_protocol(tmp_path))]) == 2
    assert f"report.output_dir: {tmp_path / 'reports'} is a file, not a folder." in capsys.readouterr().err


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"model": {"class_names": ["normal", "nodule"]}},
            "model.class_names: the model gives 3 outputs per study but 2 class names are listed",
        ),
        (
            {"model": {"architecture": "sitecal.demo.model:DemoNett"}},
            "model: model.architecture: cannot import 'sitecal.demo.model:DemoNett'.",
        ),
        ({"data": {"label_column": "finding"}}, "data.labels: "),
    ],
)
def test_check_refuses_what_run_would_refuse(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], changes: dict, expected: str
) -> None:
    protocol = _protocol(tmp_path, **changes)
    assert main(["check", str(protocol)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"sitecal: error: {protocol}: the protocol is valid but:")
    assert expected in err
    if "label_column" in str(changes):
        assert "no column 'finding'" in err


@pytest.mark.timeout(60)
def test_check_refuses_a_foreign_weights_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "weights.safetensors").write_bytes(b"\x00" * 64)
    protocol = _protocol(tmp_path, model={"path": "weights.safetensors"})
    assert main(["check", str(protocol)]) == 2
    assert "weights.safetensors: not a safetensors file" in capsys.readouterr().err


@pytest.mark.timeout(120)
def test_the_protocol_limits_reach_the_scan_and_the_reader(tmp_path: Path) -> None:
    from sitecal._pseudonym import Pseudonymizer
    from sitecal.demo import generate_demo
    from sitecal.inference import build_transforms
    from sitecal.protocol import load_protocol
    from sitecal.run.stages import scan

    manifest = generate_demo(tmp_path / "demo", n_studies=12, seed=3)
    protocol = _protocol(
        tmp_path,
        data={"dicom_dir": str(manifest.dicom_dir), "labels": str(manifest.labels_csv), "read_timeout_s": 5},
        inputs={"max_pixels_per_image": 128 * 128 - 1},  # the demo's images are 128 x 128
    )
    loaded = load_protocol(protocol)
    cohort = scan(loaded, Pseudonymizer(b"k" * 32), workers=1, progress=False)
    assert not cohort.studies
    reasons = {e.reason for e in cohort.exclusions if e.stage == "scan"}
    assert (
        "image too large: declares 128 x 128 = 16384 pixel values, above the limit of 16383 per image; "
        "raise inputs.max_pixels_per_image in the protocol to read it"
    ) in reasons
    chain = build_transforms([], max_values=loaded.protocol.inputs.max_pixels_per_image)
    with pytest.raises(RuntimeError) as info:
        chain(str(manifest.dicom_dir / manifest.studies[0].relative_path))
    assert "inputs.max_pixels_per_image" in str(info.value.__cause__ or info.value)


@pytest.mark.timeout(120)
def test_a_cohort_declaring_more_pixels_than_the_run_limit_stops_before_inference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sitecal.demo import generate_demo

    manifest = generate_demo(tmp_path / "demo", n_studies=12, seed=3)
    protocol = _protocol(
        tmp_path,
        data={"dicom_dir": str(manifest.dicom_dir), "labels": str(manifest.labels_csv)},
        inputs={"max_pixels_per_run": 128 * 128 * 5},  # the demo's images are 128 x 128
    )
    assert main(["run", str(protocol), "--no-progress", "--workers", "1"]) == 2
    err = capsys.readouterr().err
    (folder,) = (tmp_path / "reports").glob("demo-*")
    n = err.split("sitecal: error: the ")[1].split(" studies")[0]
    assert f"studies to analyse declare {int(n) * 128 * 128:,} pixel values in all, more than " in err
    assert "inputs.max_pixels_per_run (81,920). Nothing was inferred." in err
    assert "logits:" not in (folder / "run.log").read_text()  # stopped before inference


@pytest.mark.timeout(60)
def test_check_refuses_a_key_file_that_sitecal_did_not_create(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    protocol = _protocol(tmp_path)
    (tmp_path / "key").write_text("root:x:0:0:root:/root:/bin/bash\n")  # a system file named as the key
    assert main(["check", str(protocol)]) == 2
    err = capsys.readouterr().err
    assert f"privacy.key_file: {tmp_path / 'key'}: not a pseudonymisation key created by sitecal" in err
    (tmp_path / "key").unlink()
    assert main(["check", str(protocol)]) == 0
    assert not (tmp_path / "key").exists()  # check creates nothing


@pytest.mark.timeout(60)
def test_check_refuses_an_empty_dicom_folder_and_a_malformed_source_date(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    protocol = _protocol(tmp_path)
    (tmp_path / "dicom" / "IM0001").unlink()
    (tmp_path / "dicom" / ".DS_Store").write_bytes(b"")  # hidden files are not read by the scan either
    assert main(["check", str(protocol)]) == 2
    assert f"data.dicom_dir: {tmp_path / 'dicom'} holds no files." in capsys.readouterr().err
    (tmp_path / "dicom" / "IM0001").write_bytes(b"x")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    assert main(["check", str(protocol)]) == 2
    assert "SOURCE_DATE_EPOCH='yesterday': not a number of seconds" in capsys.readouterr().err
