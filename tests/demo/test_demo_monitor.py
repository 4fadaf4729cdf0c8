"""``sitecal demo --monitor`` on a small baseline: a year after go-live, one scanner drifting from month 7.

The baseline is a sealed run of a vendor's predictions file (three scanners, each miscalibrated in its own
way, so that the deployed temperatures differ), named ``demo`` as the demo's runs are; the full demo
(images, model, 2,000 studies) is not run here.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from tests.monitor.vendor import CLASSES, vendor_protocol

from sitecal.cli import main
from sitecal.cli._demo import add_demo_arguments
from sitecal.cli._demo_monitor import MONITOR_PROTOCOL, PREDICTIONS_FILE, find_demo_run, monitor_demo
from sitecal.demo.monitoring import (
    DRIFT,
    DRIFT_FROM_MONTH,
    DRIFTING_SCANNER,
    MONITOR_MONTHS,
    STUDIES_PER_MONTH,
    MonitorScenario,
    after_go_live,
    months_before,
)
from sitecal.errors import DataError
from sitecal.results import MonitoringDocument, read_document

#: Each scanner's true temperature in the validation: the fitted (deployed) ones come out near these.
TRUE_T = {"Alpha": 1.0, "Beta": 1.6, "Gamma": 0.8}
DRIFTING = "Beta"


def _protocol() -> dict[str, object]:
    # the demo's calibration criteria (its accuracy criterion is left out: it is not what drifts)
    return vendor_protocol("demo", split={"by": "crossfit", "folds": 5, "seed": 3})


def _validation_rows(rng: np.random.Generator, n: int) -> list[dict[str, object]]:
    z = rng.normal(size=(n, 3)) * 2.0
    scanner = np.array(sorted(TRUE_T))[rng.integers(0, len(TRUE_T), n)]
    tau = np.array([TRUE_T[s] for s in scanner])
    e = np.exp(z / tau[:, None])
    labels = [rng.choice(3, p=p) for p in e / e.sum(axis=1, keepdims=True)]
    return [
        {
            "accession": f"ACC{i:07d}",
            "mrn": f"MRN{i // 2:07d}",
            "scanner": scanner[i],
            "label": CLASSES[labels[i]],
            **{f"logit:{c}": f"{z[i, k]:.6f}" for k, c in enumerate(CLASSES)},
        }
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sealed run folder ``reports/demo-<time>`` of 1,500 studies on three scanners."""
    site = tmp_path_factory.mktemp("site")
    rows = _validation_rows(np.random.default_rng(11), 1500)
    with (site / "predictions.csv").open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (site / "validation.yaml").write_text(yaml.safe_dump(_protocol()), encoding="utf-8")
    assert main(["run", str(site / "validation.yaml"), "--no-progress"]) in {0, 1, 3}
    (run,) = (site / "reports").glob("demo-*")
    return run


def _monitored(tmp_path: Path, baseline: Path, *, seed: int = 0) -> tuple[int, Path]:
    home = tmp_path / "sitecal-demo"
    home.mkdir(exist_ok=True)
    code = monitor_demo(
        baseline,
        home=home,
        key_file=baseline.parent.parent / "site.key",
        drifting=DRIFTING,
        seed=seed,
        progress=False,
    )
    return code, home


def _document(home: Path, baseline: Path) -> MonitoringDocument:
    folders = sorted(p for p in (home / "monitoring" / baseline.name).iterdir() if p.is_dir())
    return read_document(folders[-1] / "monitoring.json", MonitoringDocument)


def test_a_year_after_go_live_names_the_drifting_scanner_only(
    tmp_path: Path, baseline: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, home = _monitored(tmp_path, baseline)
    said = capsys.readouterr().out
    assert code == 1 and "Verdict:   ALARM" in said
    assert f"Planted:   scanner {DRIFTING!r} drifts from" in said
    document = _document(home, baseline)
    # twelve monthly windows, the twelve before the validation run's month (dates in the future are refused)
    created = json.loads((baseline / "provenance.json").read_text())["created_utc"]
    ran = dt.date.fromisoformat(created[:10])
    scenario = MonitorScenario(first_month=months_before(ran, MONITOR_MONTHS))
    expected = [f"{scenario.month(i):%Y-%m}" for i in range(MONITOR_MONTHS)]
    assert sorted({w.window for w in document.windows}) == expected
    # the drifting scanner alarms, after the drift began; no other scanner does. Measured over seeds 0-19
    # on this baseline: Beta alarmed in 20 of 20 series (first alarm 0 to 3 months after the drift began),
    # no other scanner in any; on the default demo's run, seeds 0-9: 'FCR Demo CR' in 10 of 10 (0 to 4
    # months), no other scanner.
    alarms = [a for a in document.alerts if a.kind == "alarm"]
    assert {a.group for a in alarms if a.attribute == "scanner"} == {DRIFTING}
    assert {a.attribute for a in alarms} <= {"scanner", "overall"}
    first = min(a.window for a in alarms if a.group == DRIFTING)
    assert first >= expected[DRIFT_FROM_MONTH - 1]


def test_the_files_are_the_same_every_time_and_hold_no_key_of_the_validation(
    tmp_path: Path, baseline: Path
) -> None:
    _, home = _monitored(tmp_path, baseline)
    first = (home / PREDICTIONS_FILE).read_bytes(), (home / MONITOR_PROTOCOL).read_bytes()
    document = _document(home, baseline)
    _, home = _monitored(tmp_path, baseline)
    assert ((home / PREDICTIONS_FILE).read_bytes(), (home / MONITOR_PROTOCOL).read_bytes()) == first
    again = _document(home, baseline).to_dict()
    # every window reused: the same document, but for its own identity (each run is a new document)
    identity = ("document_id", "created_utc")
    assert {k: v for k, v in again.items() if k not in identity} == {
        k: v for k, v in document.to_dict().items() if k not in identity
    }
    text = first[0].decode()
    rows = list(csv.DictReader(text.splitlines()))
    assert {r["study"] for r in rows} == {f"MON-{i:06d}" for i in range(1, len(rows) + 1)}
    assert len({r["patient"] for r in rows}) == len(rows)
    # about 150 a month per scanner, every scanner of the baseline
    counts = {s: sum(r["scanner"] == s for r in rows) for s in TRUE_T}
    assert all(
        abs(c - MONITOR_MONTHS * STUDIES_PER_MONTH) < 5 * np.sqrt(MONITOR_MONTHS * 150)
        for c in counts.values()
    )
    # nothing of the validation run's identifiers, pseudonymised or as the vendor wrote them
    with (baseline / "cohort.csv").open(encoding="utf-8") as fh:
        keys = {v for row in csv.DictReader(fh) for v in (row["study_key"], row["patient_key"])}
    assert keys and not [k for k in keys if k in text]
    assert "ACC" not in text and "MRN" not in text
    # the protocol names the baseline and the key relative to itself, and passes 'sitecal check'
    protocol = yaml.safe_load(first[1])
    assert (home / protocol["monitoring"]["baseline"]).resolve() == baseline.resolve()
    assert main(["check", str(home / MONITOR_PROTOCOL)]) in {0, 1}


def test_labels_follow_the_stated_temperatures() -> None:
    """Without drift the labels come from softmax(z / T); with drift 2 from softmax(z / 2T)."""
    rng = np.random.default_rng(0)
    z = rng.normal(size=(4000, 3)) * 2.0
    scanners = np.array(["A", "B"])[rng.integers(0, 2, 4000)]
    scenario = MonitorScenario(
        first_month=dt.date(2025, 1, 1), months=12, per_month=2000, drifting="B", drift_from=7, seed=1
    )
    text = after_go_live(z, scanners, {"A": 0.5, "B": 1.0}, class_names=CLASSES, scenario=scenario)
    rows = list(csv.DictReader(text.splitlines()))
    logits = np.array([[float(r[f"logit:{c}"]) for c in CLASSES] for r in rows])
    labels = np.array([CLASSES.index(r["label"]) for r in rows])
    dates = np.array([r["study_date"] for r in rows])
    assert list(dates) == sorted(dates) and dates[0] >= "2025-01-01" and dates[-1] <= "2025-12-31"

    def accuracy_gap(mask: np.ndarray, t: float) -> float:
        e = np.exp(logits[mask] / t)
        p = e / e.sum(axis=1, keepdims=True)
        return float(np.mean(p.max(axis=1)) - np.mean(p.argmax(axis=1) == labels[mask]))

    scanner = np.array([r["scanner"] for r in rows])
    late = dates >= "2025-07-01"
    # under its true temperature each set is calibrated (|gap| within ~4 standard errors of 0) ...
    for mask, t in [(scanner == "A", 0.5), ((scanner == "B") & ~late, 1.0), ((scanner == "B") & late, 2.0)]:
        assert abs(accuracy_gap(mask, t)) < 4 * 0.5 / np.sqrt(mask.sum())
    # ... and the drifted one is over-confident under its deployed temperature
    assert accuracy_gap((scanner == "B") & late, 1.0) > 0.05


def test_a_drifting_scanner_the_baseline_lacks_is_refused() -> None:
    scenario = MonitorScenario(first_month=dt.date(2025, 1, 1))
    with pytest.raises(DataError, match=rf"The drifting scanner '{DRIFTING_SCANNER}' has no deployed"):
        after_go_live(
            np.zeros((2, 3)), ["A", "B"], {"A": 1.0, "B": 1.0}, class_names=CLASSES, scenario=scenario
        )


def test_the_newest_sealed_run_of_the_protocol_is_the_baseline(tmp_path: Path, baseline: Path) -> None:
    reports = tmp_path / "reports"
    shutil.copytree(baseline.parent, reports)
    shutil.copy(baseline.parent.parent / "site.key", tmp_path / "site.key")
    ran = (baseline / "protocol.yaml").read_bytes()
    assert find_demo_run(reports, ran) == reports / baseline.name
    assert find_demo_run(reports, ran + b"# another protocol\n") is None
    # a newer folder that does not open against its seal is passed over
    newer = reports / "demo-29991231T000000Z"
    shutil.copytree(reports / baseline.name, newer)
    (newer / "evaluation.json").write_text("{}", encoding="utf-8")
    assert find_demo_run(reports, ran) == reports / baseline.name
    assert find_demo_run(tmp_path / "absent", ran) is None


def test_the_help_states_what_the_monitoring_demo_plants(capsys: pytest.CaptureFixture[str]) -> None:
    # the CLI writes the numbers out (importing sitecal.demo would load torch): they must be these
    parser = argparse.ArgumentParser()
    add_demo_arguments(parser)
    help_text = " ".join(parser.format_help().split())
    assert (
        f"{MONITOR_MONTHS} months of scores, about {STUDIES_PER_MONTH} studies a month per scanner, scanner "
        f"'{DRIFTING_SCANNER}' drifting from month {DRIFT_FROM_MONTH} (its true temperature {DRIFT:g} times "
        "the deployed one)"
    ) in help_text
    with pytest.raises(SystemExit):
        main(["demo", "--monitor", "--ct"])
    assert "not allowed with argument" in capsys.readouterr().err
