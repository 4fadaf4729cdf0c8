"""``sitecal monitor``: a sealed vendor-file validation as the baseline, then months of scores after it.

A drifting scanner is alarmed and named, a stable series is not; a second run on the same data computes
nothing and gives the same document; labels that come late complete their windows; a future date, an
unsealed baseline and a history of another baseline exit 2 with nothing of the history lost.
"""

from __future__ import annotations

import csv
import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
import yaml
from tests.conftest import without_data_uris
from tests.monitor.vendor import CLASSES, vendor_protocol

from sitecal.cli import main
from sitecal.monitor._history_sql import WINDOWS
from sitecal.results import MonitoringDocument, read_document

SCANNERS = ["Alpha", "Beta"]


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _write(path: Path, rows: list[dict[str, object]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _rows(
    rng: np.random.Generator,
    n: int,
    *,
    prefix: str,
    dates: list[str] | None = None,
    drift: dict[str, float] | None = None,
    labelled: bool = True,
) -> list[dict[str, object]]:
    """Studies of two scanners, calibrated (labels drawn from the scores) unless ``drift`` says a scanner's
    true temperature is larger (its scores over-confident)."""
    z = rng.normal(size=(n, 3)) * 2.0
    scanner = np.array(SCANNERS)[rng.integers(0, 2, n)]
    tau = np.array([(drift or {}).get(s, 1.0) for s in scanner])
    truth = _softmax(z / tau[:, None])
    labels = np.array([rng.choice(3, p=p) for p in truth])
    out = []
    for i in range(n):
        row: dict[str, object] = {
            "accession": f"{prefix}{i:06d}",
            "mrn": f"P{prefix}{i // 2:06d}",
            "scanner": scanner[i],
            "label": CLASSES[labels[i]] if labelled else "",
            **{f"logit:{c}": f"{z[i, k]:.6f}" for k, c in enumerate(CLASSES)},
        }
        if dates is not None:
            row["study_date"] = dates[i]
        out.append(row)
    return out


def _protocol(folder: Path, **monitoring: object) -> dict[str, object]:
    return vendor_protocol(
        "vendor-monitor", split={"by": "patient", "fit_fraction": 0.5, "seed": 3}, **monitoring
    )


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sealed validation run of the vendor's scores (1,200 calibrated studies on two scanners)."""
    folder = tmp_path_factory.mktemp("site")
    _write(folder / "predictions.csv", _rows(np.random.default_rng(1), 1200, prefix="V"))
    (folder / "validation.yaml").write_text(yaml.safe_dump(_protocol(folder)), encoding="utf-8")
    code = main(["run", str(folder / "validation.yaml"), "--no-progress"])
    assert code in {0, 1, 3}, code  # a verdict, whichever: the run folder is what is monitored
    (run,) = (folder / "reports").iterdir()
    return run


def _site(tmp_path: Path, baseline: Path, rows: list[dict[str, object]], **monitoring: object) -> Path:
    """A monitoring protocol beside a copy of the baseline and its key; returns the protocol."""
    shutil.copytree(baseline.parent.parent / "reports", tmp_path / "reports")
    shutil.copy(baseline.parent.parent / "site.key", tmp_path / "site.key")
    _write(tmp_path / "predictions.csv", rows)
    protocol = _protocol(tmp_path, baseline=f"reports/{baseline.name}", **monitoring)
    path = tmp_path / "monitor.yaml"
    path.write_text(yaml.safe_dump(protocol), encoding="utf-8")
    return path


def _months(rng: np.random.Generator, n_months: int, per_month: int, **kw: object) -> list[dict[str, object]]:
    rows = []
    for month in range(n_months):
        dates = [f"2026-{month + 1:02d}-{d:02d}" for d in rng.integers(1, 28, per_month)]
        drift = kw.get("drift") if month >= 3 else None
        rows += _rows(rng, per_month, prefix=f"M{month}-", dates=dates, drift=drift)  # type: ignore[arg-type]
    return rows


def _document(folder_root: Path) -> MonitoringDocument:
    (folder,) = sorted(p for p in folder_root.iterdir() if p.is_dir())[-1:]
    return read_document(folder / "monitoring.json", MonitoringDocument)


def test_a_drifting_scanner_is_alarmed_and_named(
    tmp_path: Path, baseline: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _months(np.random.default_rng(2), 6, 400, drift={"Beta": 2.0})
    path = _site(tmp_path, baseline, rows)
    assert main(["monitor", str(path), "--no-progress"]) == 1
    said = capsys.readouterr().out
    document = _document(tmp_path / "monitoring")
    alarms = [a for a in document.alerts if a.kind == "alarm"]
    assert alarms and {(a.attribute, a.group) for a in alarms} <= {
        ("scanner", "Beta"),
        ("overall", "All studies"),
    }
    assert any(a.group == "Beta" and a.window in {"2026-04", "2026-05"} for a in alarms)
    assert "ALARM: 2026-0" in said and "scanner=Beta" in said and "Verdict:   ALARM" in said
    # the evidence is what the windows' stored increments give: the Beta temperature test crossed its bar
    beta = [w for w in document.windows if w.group == "Beta"]
    assert [w.window for w in beta] == [f"2026-{m:02d}" for m in range(1, 7)]
    assert beta[-1].temperature is not None and beta[-1].temperature.low > 1.25


def test_a_stable_series_is_not_alarmed_and_a_second_run_reuses_every_window(
    tmp_path: Path, baseline: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _site(tmp_path, baseline, _months(np.random.default_rng(3), 4, 300))
    assert main(["monitor", str(path), "--no-progress"]) == 0
    first = _document(tmp_path / "monitoring")
    assert first.verdict == "no_alarm" and not [a for a in first.alerts if a.kind == "alarm"]
    with sqlite3.connect(tmp_path / "monitoring" / "history.sqlite") as db:
        before = sorted(db.execute(f"SELECT * FROM {WINDOWS}").fetchall())
    assert main(["monitor", str(path), "--no-progress"]) == 0
    second = _document(tmp_path / "monitoring")
    identity = ("document_id", "created_utc")  # each run is a new document, of the same numbers
    assert {k: v for k, v in second.to_dict().items() if k not in identity} == {
        k: v for k, v in first.to_dict().items() if k not in identity
    }
    with sqlite3.connect(tmp_path / "monitoring" / "history.sqlite") as db:
        assert sorted(db.execute(f"SELECT * FROM {WINDOWS}").fetchall()) == before
    assert "Verdict:   no alarm" in capsys.readouterr().out


def test_late_labels_complete_their_window(tmp_path: Path, baseline: Path) -> None:
    rng = np.random.default_rng(4)
    rows = _months(rng, 2, 200)
    unlabelled = [{**r, "label": ""} if str(r["study_date"]).startswith("2026-02") else r for r in rows]
    path = _site(tmp_path, baseline, unlabelled)
    assert main(["monitor", str(path), "--no-progress"]) == 0
    early = {(w.window, w.group): w for w in _document(tmp_path / "monitoring").windows}
    assert (
        early[("2026-02", "All studies")].n_labelled == 0
        and early[("2026-02", "All studies")].metrics is None
    )
    _write(tmp_path / "predictions.csv", rows)  # the labels came
    assert main(["monitor", str(path), "--no-progress"]) == 0
    late = {(w.window, w.group): w for w in _document(tmp_path / "monitoring").windows}
    assert late[("2026-02", "All studies")].n_labelled == 200 and late[("2026-02", "All studies")].metrics
    assert late[("2026-01", "All studies")].to_dict() == early[("2026-01", "All studies")].to_dict()


def test_bad_input_exits_2_and_keeps_the_history(
    tmp_path: Path, baseline: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _months(np.random.default_rng(5), 2, 100)
    path = _site(tmp_path, baseline, rows)
    assert main(["monitor", str(path), "--no-progress"]) == 0
    history = (tmp_path / "monitoring" / "history.sqlite").read_bytes()
    capsys.readouterr()
    # a date in the future: named by row and column, the date itself never printed
    _write(tmp_path / "predictions.csv", [*rows, {**rows[0], "accession": "X1", "study_date": "2999-01-01"}])
    assert main(["monitor", str(path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "column 'study_date'" in err and "a date in the future" in err and "2999" not in err
    _write(tmp_path / "predictions.csv", [*rows, {**rows[0], "accession": "X2", "study_date": "03/04/2026"}])
    assert main(["monitor", str(path), "--no-progress"]) == 2
    assert "not a date (expected YYYY-MM-DD or YYYYMMDD)" in capsys.readouterr().err
    # a baseline edited after its seal
    _write(tmp_path / "predictions.csv", rows)
    evaluation = tmp_path / "reports" / baseline.name / "evaluation.json"
    evaluation.write_text(evaluation.read_text().replace('"verdict"', '"verdict" ', 1))
    assert main(["monitor", str(path), "--no-progress"]) == 2
    assert "evaluation.json" in capsys.readouterr().err
    assert (tmp_path / "monitoring" / "history.sqlite").read_bytes() == history


def test_a_crash_exits_4_never_as_an_alarm_and_leaves_its_reason_in_run_log(
    tmp_path: Path, baseline: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _months(np.random.default_rng(14), 1, 60, drift={"Beta": 3.0})
    path = _site(tmp_path, baseline, rows)

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the trend figure could not be drawn")

    monkeypatch.setattr("sitecal.run.monitoring.render_monitoring", broken)
    assert main(["monitor", str(path), "--no-progress"]) == 4
    assert "Verdict" not in capsys.readouterr().out
    (folder,) = [p for p in (tmp_path / "monitoring").iterdir() if p.is_dir()]
    assert (folder / "INCOMPLETE").is_file() and not (folder / "seal.json").exists()
    assert "RuntimeError: the trend figure could not be drawn" in (folder / "run.log").read_text()


def test_check_refuses_a_monitoring_section_without_a_date_column(tmp_path: Path, baseline: Path) -> None:
    path = _site(tmp_path, baseline, _months(np.random.default_rng(6), 1, 50))
    raw = yaml.safe_load(path.read_text())
    del raw["monitoring"]["date_column"]
    path.write_text(yaml.safe_dump(raw))
    assert main(["check", str(path)]) == 2
    raw["monitoring"]["date_column"] = "study_date"
    raw["monitoring"]["database"] = "postgresql://monitor:secret@db.example.org/sitecal"
    path.write_text(yaml.safe_dump(raw))
    assert main(["check", str(path)]) == 2


def test_the_document_is_sealed(tmp_path: Path, baseline: Path) -> None:
    path = _site(tmp_path, baseline, _months(np.random.default_rng(7), 1, 100))
    assert main(["monitor", str(path), "--no-progress"]) == 0
    (folder,) = [p for p in (tmp_path / "monitoring").iterdir() if p.is_dir()]
    seal = json.loads((folder / "seal.json").read_text())
    assert {"monitoring.json", "monitoring.pdf", "monitoring.html"} <= set(seal["files"])
    assert "run.log" in seal["growing"]  # sealed by its first bytes: later lines may follow
    assert any(name.startswith("figures/") for name in seal["files"])
    assert not (folder / "INCOMPLETE").exists()


def test_check_refuses_what_monitor_refuses_before_any_work(
    tmp_path: Path, baseline: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A future date, an edited baseline, a history of another baseline: check exits 2 naming each."""
    rows = _months(np.random.default_rng(8), 1, 60)
    unlabelled = [{**r, "label": ""} for r in rows]
    path = _site(tmp_path, baseline, unlabelled)
    assert main(["check", str(path)]) == 0  # no label yet is no problem after go-live
    said = capsys.readouterr().out
    assert f"1 subgroup, monitoring against reports/{baseline.name} (its seal" in said
    _write(tmp_path / "predictions.csv", [*rows, {**rows[0], "accession": "X1", "study_date": "2999-01-01"}])
    assert main(["check", str(path)]) == 2
    assert "monitoring: " in capsys.readouterr().err
    _write(tmp_path / "predictions.csv", rows)
    history = tmp_path / "monitoring" / "history.sqlite"
    history.parent.mkdir()
    with sqlite3.connect(history) as db:
        db.execute("CREATE TABLE unrelated (x)")
    assert main(["check", str(path)]) == 2
    assert "history.sqlite" in capsys.readouterr().err
    history.unlink()
    evaluation = tmp_path / "reports" / baseline.name / "evaluation.json"
    evaluation.write_bytes(evaluation.read_bytes() + b" ")
    assert main(["check", str(path)]) == 2
    assert "evaluation.json" in capsys.readouterr().err


def test_the_example_monitoring_protocol_passes_check_and_monitors(
    tmp_path: Path, baseline: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """protocols/monitoring.yaml as written, but for its baseline's name, against a real sealed baseline."""
    from tests.conftest import REPO

    text = (REPO / "protocols" / "monitoring.yaml").read_text(encoding="utf-8")
    assert "reports/vendor-chest-triage-RUN" in text
    shutil.copytree(baseline.parent, tmp_path / "reports")
    shutil.copy(baseline.parent.parent / "site.key", tmp_path / "reports" / ".sitecal-pseudonym-key")
    (tmp_path / "monitoring.yaml").write_text(
        text.replace("reports/vendor-chest-triage-RUN", f"reports/{baseline.name}"), encoding="utf-8"
    )
    rows = _months(np.random.default_rng(9), 2, 80)
    _write(tmp_path / "after-go-live.csv", rows)
    assert main(["check", str(tmp_path / "monitoring.yaml")]) == 0, capsys.readouterr().err
    assert main(["monitor", str(tmp_path / "monitoring.yaml"), "--no-progress"]) == 0
    assert "Monitored: 2 month windows" in capsys.readouterr().out


def test_the_monitoring_folder_stands_alone_and_its_report_is_sent(
    tmp_path: Path, baseline: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """monitoring.dcm wraps monitoring.pdf; sitecal send finds the key and sends it, no --protocol."""
    import pydicom
    from tests.pacs.orthanc import AE_TITLE, running_orthanc

    path = _site(tmp_path, baseline, _months(np.random.default_rng(10), 1, 60))
    assert main(["monitor", str(path), "--no-progress"]) == 0
    (folder,) = [p for p in (tmp_path / "monitoring").iterdir() if p.is_dir()]
    dcm = pydicom.dcmread(folder / "monitoring.dcm")
    assert bytes(dcm.EncapsulatedDocument).rstrip(b"\0") == (folder / "monitoring.pdf").read_bytes()
    assert dcm.StudyID == json.loads((folder / "monitoring.json").read_text())["document_id"]
    assert (folder / "protocol.yaml").read_text(encoding="utf-8") == path.read_text(encoding="utf-8")
    capsys.readouterr()
    with running_orthanc(tmp_path / "archive") as archive:
        to = f"dimse://{AE_TITLE}@127.0.0.1:{archive.dicom_port}"
        assert main(["send", str(folder), "--to", to]) == 0
    said = capsys.readouterr().out
    assert f"Sent:    monitoring.dcm to {AE_TITLE}@127.0.0.1:{archive.dicom_port} by C-STORE" in said
    records = json.loads((folder / "sent.json").read_text())
    assert [(r["file"], r["how"], r["outcome"]) for r in records] == [("monitoring.dcm", "C-STORE", "stored")]


def test_a_rare_subgroup_value_is_pooled_as_a_run_pools_it(tmp_path: Path, baseline: Path) -> None:
    """A scanner value of fewer than privacy.min_count_shown studies (a name typed into it) never shows."""
    rows = _months(np.random.default_rng(11), 1, 100)
    rows[:2] = [{**row, "scanner": "SMITH JOHN"} for row in rows[:2]]
    path = _site(tmp_path, baseline, rows)
    assert main(["monitor", str(path), "--no-progress"]) == 0
    (folder,) = [p for p in (tmp_path / "monitoring").iterdir() if p.is_dir()]
    groups = {w.group for w in _document(tmp_path / "monitoring").windows if w.attribute == "scanner"}
    assert "SMITH JOHN" not in groups and groups - set(SCANNERS)  # pooled under another name
    for name in ("monitoring.json", "monitoring.html"):  # the figures are base64, no text
        assert "SMITH" not in without_data_uris((folder / name).read_text(encoding="utf-8"))
    with sqlite3.connect(tmp_path / "monitoring" / "history.sqlite") as db:
        assert "SMITH" not in repr(db.execute(f"SELECT * FROM {WINDOWS}").fetchall())


def test_scores_without_their_labels_yet_are_monitored_and_labels_lost_are_refused(
    tmp_path: Path, baseline: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file without a label column is the label-free part; one that lost labels overwrites nothing."""
    rows = _months(np.random.default_rng(12), 2, 80)
    path = _site(tmp_path, baseline, rows)
    assert main(["monitor", str(path), "--no-progress"]) == 0
    history = (tmp_path / "monitoring" / "history.sqlite").read_bytes()
    _write(tmp_path / "predictions.csv", [{k: v for k, v in r.items() if k != "label"} for r in rows])
    capsys.readouterr()
    assert main(["monitor", str(path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "fewer labels than the history measured" in err and "2026-01" in err
    assert (tmp_path / "monitoring" / "history.sqlite").read_bytes() == history
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    unlabelled = _site(fresh, baseline, [{k: v for k, v in r.items() if k != "label"} for r in rows])
    assert main(["check", str(unlabelled)]) == 0
    assert main(["monitor", str(unlabelled), "--no-progress"]) == 0
    assert {w.n_labelled for w in _document(fresh / "monitoring").windows} == {0}


def test_source_date_epoch_fixes_the_document_s_time_and_id(
    tmp_path: Path, baseline: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two monitors at the same SOURCE_DATE_EPOCH on the same data write the same document."""
    rows = _months(np.random.default_rng(13), 1, 60)
    documents = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        path = _site(tmp_path / name, baseline, rows)
        monkeypatch.setenv("SOURCE_DATE_EPOCH", "1767225600")  # 2026-01-01, before some study dates
        assert main(["monitor", str(path), "--no-progress"]) == 0
        documents.append(_document(tmp_path / name / "monitoring").to_dict())
    assert documents[0] == documents[1]
    assert documents[0]["created_utc"] == "2026-01-01T00:00:00Z"


def test_a_new_scanner_and_a_changed_software_version_are_alerts_with_no_label(
    tmp_path: Path, baseline: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A scanner the baseline never saw is new and uncalibrated; a software version (a subgroup the
    baseline did not report) that its first monitored window did not have is new; neither needs a label."""
    rows = _months(np.random.default_rng(13), 4, 120)
    for row in rows:
        month = int(str(row["study_date"])[5:7])
        row["software"] = "VB20" if month >= 3 and row["scanner"] == "Alpha" else "VA10"
        row["label"] = ""
    for row in rows[-30:]:
        row["scanner"] = "Gamma"
    path = _site(tmp_path, baseline, rows)
    protocol = yaml.safe_load(path.read_text())
    protocol["subgroups"]["software"] = {"column": "software"}
    path.write_text(yaml.safe_dump(protocol))
    assert main(["monitor", str(path), "--no-progress"]) == 0
    alerts = {(a.kind, a.window, a.attribute, a.group) for a in _document(tmp_path / "monitoring").alerts}
    new = {a for a in alerts if a[0] in {"new_group", "unseen_group"}}
    assert new == {
        ("new_group", "2026-03", "software", "VB20"),
        ("new_group", "2026-04", "scanner", "Gamma"),
        ("unseen_group", "2026-04", "scanner", "Gamma"),
    }
    assert "a group not seen before: 2026-03  software=VB20" in capsys.readouterr().out
