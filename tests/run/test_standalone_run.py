"""A run folder stands alone: laid out as the demo's (``report.output_dir: ../reports``, every path relative
to the protocol's folder), moved elsewhere, it is exported and sent without ``--protocol``, from the
protocol's folder the run recorded (``resolved.json``, sealed); an edited record is refused."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest
import yaml

from sitecal._seal import COMPLETE, write_seal
from sitecal.cli import main
from sitecal.run._resolved import RESOLVED

pytestmark = pytest.mark.slow


def _closed_port() -> int:
    """A local port nothing listens on (bound, then let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """`sitecal demo`'s layout on 160 studies, with a destination the run does not send to (nothing listens).

    The protocol is the packaged one copied to sitecal-demo/demo.yaml (output_dir ../reports, relative
    data paths, the default key beside the run folders), made quicker; its archive's credentials file is
    named by a path relative to the protocol's folder.
    """
    from sitecal.demo import prepare_demo

    root = tmp_path_factory.mktemp("demo-layout")
    prepared = prepare_demo(n_studies=160, home=root / "sitecal-demo")
    credentials = prepared.protocol.parent / "archive-credentials.yaml"
    credentials.write_text(yaml.safe_dump({"username": "sitecal", "password": "not-used"}))
    credentials.chmod(0o600)
    url = f"http://127.0.0.1:{_closed_port()}/dicom-web"
    raw = yaml.safe_load(prepared.protocol.read_text())
    raw["evaluation"]["bootstrap"]["n_resamples"] = 50
    raw["evaluation"]["planning"] = {"simulations": 0}
    raw["calibration"].update(min_group_size=20, split={"by": "patient", "fit_fraction": 0.5, "seed": 3})
    raw["inputs"]["num_workers"] = 0
    raw["report"]["send_to"] = {"dicomweb": url, "credentials_file": credentials.name}
    prepared.protocol.write_text(yaml.safe_dump(raw, sort_keys=False))
    assert raw["report"]["output_dir"] == "../reports"
    # `sitecal demo` runs from the folder above (the working folder); here, from anywhere
    argv = ["run", str(prepared.protocol), "--no-progress", "--workers", "1", "--allow-output-anywhere"]
    assert main(argv) in (0, 1, 3)
    (folder,) = (root / "reports").glob("demo-*")
    return {"folder": folder, "protocol": prepared.protocol, "url": url, "root": root}


def _moved(demo_run: dict, tmp_path: Path) -> Path:
    """A copy of the run folder away from the protocol and from the folder of run folders."""
    return Path(shutil.copytree(demo_run["folder"], tmp_path / "archived" / demo_run["folder"].name))


def _reseal(demo_run: dict, folder: Path) -> None:
    """Seal the folder again under the run's key, as a run that wrote what it now holds would have."""
    key = (demo_run["root"] / "reports" / ".sitecal-pseudonym-key").read_text().strip().encode()
    write_seal(folder, key, state=COMPLETE)


def test_the_run_records_the_protocol_it_read(demo_run: dict) -> None:
    record = json.loads((demo_run["folder"] / RESOLVED).read_text())
    assert record["protocol_file"] == str(demo_run["protocol"].resolve())
    assert RESOLVED in json.loads((demo_run["folder"] / "seal.json").read_text())["files"]


def test_export_and_send_need_no_protocol(
    demo_run: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _moved(demo_run, tmp_path)
    assert main(["export", str(folder), "--format", "torchscript", "--no-progress"]) == 0
    assert (folder / "export" / "calibrated.ts").is_file()
    capsys.readouterr()
    # the destination and its credentials file (relative to the protocol's folder) come from the run;
    # nothing listens there, and the message names it
    assert main(["send", str(folder)]) == 2
    err = capsys.readouterr().err
    assert demo_run["url"] in err and "credentials" not in err and "--protocol" not in err, err
    (record,) = json.loads((folder / "sent.json").read_text())
    assert record["to"] == demo_run["url"] and record["outcome"] != "stored"
    # --protocol still overrides the run's own
    other = tmp_path / "other.yaml"
    raw = yaml.safe_load(demo_run["protocol"].read_text())
    raw["report"].pop("send_to")
    other.write_text(yaml.safe_dump(raw, sort_keys=False))
    key = demo_run["root"] / "reports" / ".sitecal-pseudonym-key"  # other.yaml's own key is not there
    assert main(["send", str(folder), "--protocol", str(other), "--key", str(key)]) == 2
    assert f"{other}: report.send_to is not set" in capsys.readouterr().err


def test_an_edited_record_is_refused(
    demo_run: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _moved(demo_run, tmp_path)
    elsewhere = Path(shutil.copytree(demo_run["protocol"].parent, tmp_path / "elsewhere"))
    record = json.loads((folder / RESOLVED).read_text())
    (folder / RESOLVED).write_text(json.dumps({**record, "protocol_file": str(elsewhere / "demo.yaml")}))
    for command in (["export", str(folder), "--format", "torchscript"], ["send", str(folder)]):
        assert main(command) == 2
        assert f"{folder / RESOLVED}: " in capsys.readouterr().err, command
    assert not (folder / "export").exists() and not (folder / "sent.json").exists()
    # a record the key's holder sealed is still checked: a relative path is none a run writes
    (folder / RESOLVED).write_text(json.dumps({**record, "protocol_file": "sitecal-demo/demo.yaml"}))
    _reseal(demo_run, folder)
    assert main(["export", str(folder), "--format", "torchscript"]) == 2
    assert f"{folder / RESOLVED}: protocol_file: expected an absolute path" in capsys.readouterr().err


def test_a_folder_without_the_record_falls_back_to_output_dir(
    demo_run: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder of an earlier sitecal: found back from report.output_dir, which ../reports does not allow."""
    folder = Path(shutil.copytree(demo_run["folder"], demo_run["root"] / "reports" / "demo-older"))
    try:
        (folder / RESOLVED).unlink()
        _reseal(demo_run, folder)
        assert main(["export", str(folder), "--format", "torchscript"]) == 2
        assert "report.output_dir leads out of the protocol's folder" in capsys.readouterr().err
        argv = ["export", str(folder), "--format", "torchscript", "--no-progress"]
        assert main([*argv, "--protocol", str(demo_run["protocol"])]) == 0
    finally:
        shutil.rmtree(folder)


def test_plan_from_run_takes_the_runs_own_protocol(
    demo_run: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _moved(demo_run, tmp_path)
    argv = ["plan", "--from-run", str(folder), "--no-progress", "--simulations", "20", "--sizes", "50"]
    assert main(argv) == 0
    assert "calibration-per-scanner" in capsys.readouterr().out
    assert main(["plan", "--no-progress"]) == 2
    assert "give the protocol file (plan before data), or --from-run RUN_DIR" in capsys.readouterr().err
    (folder / "protocol.yaml").write_text(demo_run["protocol"].read_text() + "# edited\n")
    assert main(argv) == 2
    assert f"{folder / 'protocol.yaml'}: " in capsys.readouterr().err
