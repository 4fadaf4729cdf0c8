"""``sitecal demo`` from any folder: the packaged protocol copied there, its cohort beside it, nothing in
the package.

The full runs are in tests/e2e/test_end_to_end.py (radiographs, 400 studies) and
tests/e2e/test_ct_end_to_end.py (CT, 50 studies), both from an empty folder; these tests stop after
generating.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import sitecal.demo
from sitecal.cli import main
from sitecal.demo import (
    DEMO_FOLDER,
    MIN_DEMO_STUDIES,
    DemoKind,
    default_studies,
    demo_protocol_path,
    demo_weights_path,
    prepare_demo,
)
from sitecal.demo.ct import demo_ct_weights_path
from sitecal.errors import DataError, OutputError, ProtocolError
from sitecal.protocol import load_protocol

PACKAGE = Path(sitecal.demo.__file__).resolve().parents[1]  # the installed sitecal package


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``folder``: (size, modification time in ns)."""
    return {
        p.relative_to(folder).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_generate_only_from_an_empty_folder_writes_there_and_nothing_in_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    demo_before = _snapshot(PACKAGE / "demo")
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--generate-only", "--studies", "50", "--no-progress"]) == 0
    out = capsys.readouterr().out
    home = tmp_path / "sitecal-demo"
    assert f"Demo cohort: {home / 'radiographs'}" in out and "Protocol:    sitecal-demo/demo.yaml" in out
    # the packaged protocol, copied as it is; the cohort beside it; nothing else in the working folder
    assert (home / "demo.yaml").read_text() == demo_protocol_path().read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sitecal-demo"]
    assert sorted(p.name for p in home.iterdir()) == ["demo.yaml", "radiographs"]
    cohort = home / "radiographs"
    assert {p.name for p in cohort.iterdir()} == {
        "dicom",
        "labels.csv",
        "manifest.json",
        ".sitecal-demo.json",
    }
    assert json.loads((cohort / "manifest.json").read_text())["n_studies"] == 50
    stamp = json.loads((cohort / ".sitecal-demo.json").read_text())
    assert stamp == {"kind": "radiograph", "n_studies": 50, "seed": 0, "sitecal": sitecal.__version__}
    # the copy resolves its data against the working folder and its model to the packaged weights
    loaded = load_protocol(home / "demo.yaml")
    assert loaded.dicom_dir == cohort / "dicom" and loaded.labels_path == cohort / "labels.csv"
    assert loaded.output_root == tmp_path / "reports"
    assert loaded.model_path == demo_weights_path() and loaded.model_path.is_file()
    # nothing was written inside the installed package
    assert _snapshot(PACKAGE / "demo") == demo_before
    for name in ("sitecal-demo", "radiographs", "reports", "labels.csv", ".sitecal-demo.json"):
        assert not [p for p in PACKAGE.rglob(name) if "__pycache__" not in p.parts], name

    # the same cohort is kept, not generated again; another size replaces it
    again = prepare_demo(n_studies=50)
    assert (again.protocol, again.generated, again.kind) == (DEMO_FOLDER / "demo.yaml", False, "radiograph")
    assert prepare_demo(n_studies=60).generated
    assert json.loads((cohort / "manifest.json").read_text())["n_studies"] == 60


def test_an_edited_copy_is_never_overwritten_and_runs_with_protocol(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    copy = tmp_path / "sitecal-demo" / "demo.yaml"
    copy.parent.mkdir()
    edited = demo_protocol_path().read_text().replace("seed: 20261202", "seed: 1")
    copy.write_text(edited)
    assert main(["demo", "--generate-only", "--studies", "50", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "sitecal-demo/demo.yaml: differs from the demo protocol of this sitecal version" in err
    assert "Run your copy with 'sitecal demo --protocol sitecal-demo/demo.yaml'" in err
    assert copy.read_text() == edited
    assert main(["demo", "--protocol", str(copy), "--generate-only", "--studies", "50", "--no-progress"]) == 0
    assert (copy.parent / "radiographs" / "labels.csv").is_file()


def test_the_ct_demo_has_its_own_copy_and_folder(tmp_path: Path) -> None:
    # prepare_demo up to the generator (the CT cohort is generated and run in tests/e2e/test_ct_end_to_end.py)
    home = tmp_path / "elsewhere"
    copy = home / "demo-ct.yaml"
    copy.parent.mkdir()
    copy.write_text(demo_protocol_path("ct").read_text())
    loaded = load_protocol(copy)
    assert loaded.protocol.inputs.kind == "volume"
    assert loaded.dicom_dir == home / "ct" / "dicom" and loaded.output_root == tmp_path / "reports"
    assert loaded.model_path == demo_ct_weights_path() and loaded.model_path.is_file()
    with pytest.raises(
        ProtocolError, match=r"demo-ct\.yaml: a ct protocol \(inputs\.kind\), not a radiograph"
    ):
        prepare_demo(copy, kind="radiograph")


def test_demo_arguments_are_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--generate-only", "--studies", "10"]) == 2
    assert "sitecal: error: --studies must be at least 50. Got 10." in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # refused before anything was written
    with pytest.raises(SystemExit) as info:  # one or the other: the packaged CT demo, or your protocol
        main(["demo", "--ct", "--protocol", "demo.yaml"])
    assert info.value.code == 2
    assert main(["demo", "--protocol", "absent.yaml", "--generate-only"]) == 2
    assert "absent.yaml: demo protocol not found" in capsys.readouterr().err
    with pytest.raises(
        DataError, match=r"'kind' parameter of sitecal demo must be one of .* Did you mean 'ct'"
    ):
        prepare_demo(kind="cct")
    (tmp_path / "sitecal-demo").mkdir()
    (tmp_path / "sitecal-demo" / "demo.yaml").mkdir()
    with pytest.raises(OutputError, match="exists and is not a file"):
        prepare_demo()
    assert list(tmp_path.rglob("*.dcm")) == []


def test_the_help_states_the_demo_sizes_sitecal_demo_uses(capsys: pytest.CaptureFixture[str]) -> None:
    # cli.py writes these numbers out (importing sitecal.demo for them would load torch on every command)
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    text = re.sub(r"(?<=-)\s+", "", re.sub(r"\s+", " ", capsys.readouterr().out))  # argparse wraps at '-'
    assert (
        f"at least {MIN_DEMO_STUDIES} (default: {default_studies(DemoKind.RADIOGRAPH)} radiographs, " in text
    )
    assert f"{default_studies(DemoKind.CT)} CT studies)" in text
    for name in ("demo.yaml", "demo-ct.yaml"):
        assert f"{DEMO_FOLDER}/{name}" in text
