from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from tests.conftest import DEMO_PROTOCOL

import sitecal.run
from sitecal.cli import main
from sitecal.cli._commands import COMMANDS, COMMANDS_METAVAR


def _protocol_with_inputs(tmp_path: Path) -> Path:
    (tmp_path / "dicom").mkdir()
    (tmp_path / "dicom" / "IM0001").write_bytes(b"not yet exported")
    (tmp_path / "labels.csv").write_text("StudyInstanceUID,label\n1.2.3.4,nodule\n")
    text = DEMO_PROTOCOL.read_text().replace("radiographs/dicom", str(tmp_path / "dicom"))
    text = text.replace("radiographs/labels.csv", str(tmp_path / "labels.csv"))
    text = text.replace("output_dir: ../reports", "output_dir: reports")
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("verdict", "code"), [("pass", 0), ("fail", 1), ("insufficient data", 3), ("inconclusive", 3)]
)
def test_run_exit_code_follows_verdict(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    verdict: str,
    code: int,
) -> None:
    monkeypatch.setattr(
        sitecal.run,
        "run_protocol",
        lambda loaded, **kw: SimpleNamespace(
            verdict=verdict, report_pdf=tmp_path / "report.pdf", evaluation={"cohort_flow": {}}, sent=None
        ),
    )
    assert main(["run", str(_protocol_with_inputs(tmp_path)), "--no-progress"]) == code
    assert f"Verdict: {verdict.upper()}" in capsys.readouterr().out


def test_check_valid_protocol(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(_protocol_with_inputs(tmp_path))]) == 0
    assert "valid protocol 'demo'" in capsys.readouterr().out


def test_check_refuses_what_run_would_refuse(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a metric the group comparisons cannot evaluate: refused when the protocol is read, by check and run
    path = _protocol_with_inputs(tmp_path)
    path.write_text(
        path.read_text().replace(
            "disparity_metrics: [ece, calibration_gap, nll]", "disparity_metrics: [smooth_ece]"
        )
    )
    for command in (["check", str(path)], ["run", str(path), "--no-progress"]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert "evaluation.disparity_metrics: 'smooth_ece' cannot be compared between groups" in err


def test_check_reports_missing_inputs_in_one_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = DEMO_PROTOCOL.read_text().replace("radiographs/", str(tmp_path / "absent") + "/")
    text = text.replace(
        "site: {tag: InstitutionName, label: Site}",
        "site: {tag: InstitutionName, label: Site, mapping: sites.csv}\n"
        "  station: {tag: StationName, mapping: stations.csv}",
    )
    (tmp_path / "stations.csv").write_text("value,group\nCT01,\n")
    path = tmp_path / "p.yaml"
    path.write_text(text)
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"sitecal: error: {path}: the protocol is valid but:")
    assert "data.dicom_dir: folder not found" in err and "data.labels: file not found" in err
    lines = err.splitlines()
    assert any("subgroups.site.mapping" in line and "sites.csv" in line for line in lines), err
    assert any("subgroups.station.mapping" in line and "stations.csv" in line for line in lines), err


def test_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["frobnicate"])
    assert info.value.code == 2


def test_demo_refuses_to_overwrite_foreign_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "radiographs"
    (data / "dicom").mkdir(parents=True)
    (data / "precious.txt").write_text("not ours")
    protocol = tmp_path / "demo.yaml"
    protocol.write_text(DEMO_PROTOCOL.read_text())
    assert main(["demo", "--protocol", str(protocol), "--no-progress"]) == 2
    assert "was not made by 'sitecal demo'; refusing to overwrite it" in capsys.readouterr().err
    assert (data / "precious.txt").exists()


def test_the_usage_line_names_every_command_of_the_table() -> None:
    names = [command.name for command in COMMANDS]
    assert len(set(names)) == len(names)
    assert sorted(COMMANDS_METAVAR.strip("{}").split(",")) == sorted(names)


@pytest.mark.parametrize("command", [command.name for command in COMMANDS])
def test_every_command_has_its_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: sitecal {command} [-h]")


def test_the_exclusion_summary_counts_in_the_right_number(capsys: pytest.CaptureFixture[str]) -> None:
    from sitecal.cli._exclusions import print_exclusion_rows

    print_exclusion_rows(
        [
            {"stage": "labels", "reason": "study has no label", "unit": "label", "count": 1},
            {"stage": "scan", "reason": "not a DICOM file", "unit": "file", "count": 2},
            {"stage": "scan", "reason": "unreadable", "unit": "series", "count": 1},
        ]
    )
    out = capsys.readouterr().out
    assert "       1 label row at labels: study has no label" in out
    assert "       2 files at scan: not a DICOM file" in out
    assert "       1 series at scan: unreadable" in out
    assert "label rows" not in out


def test_the_command_leaves_no_console_handler_behind(tmp_path: Path) -> None:
    """main() called twice (a notebook, a test) adds no second console, and none bound to a closed stream."""
    import logging

    before = list(logging.getLogger().handlers)
    assert main(["check", str(tmp_path / "missing.yaml")]) == 2
    assert main(["check", str(tmp_path / "missing.yaml")]) == 2
    assert logging.getLogger().handlers == before
