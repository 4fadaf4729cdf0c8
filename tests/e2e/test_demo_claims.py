"""What the README and the demo promise, checked on the full-size demo cohort (2,000 studies, seed 0)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.conftest import write_demo_protocol

from sitecal.demo import generate_demo
from sitecal.protocol import load_protocol
from sitecal.run import run_protocol

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def full_demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    root = tmp_path_factory.mktemp("demo")
    manifest = generate_demo(root / "data", n_studies=2000, seed=0)
    # point estimates do not depend on B; fewer resamples keep the suite quick
    path = write_demo_protocol(root, manifest, n_resamples=200)
    result = run_protocol(load_protocol(path), progress=False)
    return result.folder, manifest


def test_per_scanner_calibration_lowers_held_out_ece_off_the_reference_scanner(full_demo: tuple) -> None:
    """The demo's claim, in the form that holds for any split of the patients.

    Each off-reference scanner has about 120-300 held-out studies, where a binned ECE moves by a few
    hundredths from split to split: over 20 random site keys (splits), one scanner's ECE rose after
    calibration in 2 of them. What held in all 20: every off-reference scanner is over-confident (T > 1),
    their held-out ECE falls on average (weighted by studies; to at most 0.69 of its value before), and
    the overall ECE and NLL fall.
    """
    folder, manifest = full_demo
    evaluation = json.loads((folder / "evaluation.json").read_text())
    scanners = evaluation["subgroups"]["scanner"]
    assert {g["group"] for g in scanners} == set(manifest.scanners)
    others = [g for g in scanners if g["group"] != manifest.reference_scanner]
    assert len(others) >= 3
    for g in others:
        assert not g["small"], g["group"]
        assert g["temperature"] > 1.0, g["group"]  # over-confident off the training scanner
    n = sum(g["n"] for g in others)
    before, after = (
        sum(g["n"] * g["metrics"]["ece"][stage]["estimate"] for g in others) / n
        for stage in ("before", "after")
    )
    assert after < 0.8 * before
    for metric in ("ece", "nll"):
        overall = evaluation["overall"]["metrics"][metric]
        assert overall["after"]["estimate"] < overall["before"]["estimate"], metric


def test_every_scanner_has_its_own_temperature(full_demo: tuple) -> None:
    folder, manifest = full_demo
    calibration = json.loads((folder / "calibration.json").read_text())
    assert {name: c["source"] for name, c in calibration["groups"].items()} == {
        s: "own" for s in manifest.scanners
    }


def test_four_scanners_pass_and_the_one_near_the_margin_is_inconclusive_as_the_readme_says(
    full_demo: tuple,
) -> None:
    """README: DRX Demo (estimate about 0.08) is inconclusive, the four others pass; Needed n 300 to 600."""
    folder, manifest = full_demo
    evaluation = json.loads((folder / "evaluation.json").read_text())
    (criterion,) = [c for c in evaluation["acceptance"] if c["scope"] == "scanner"]
    needed = {r["group"]: r["study_size"]["needed"] for r in criterion["results"]}
    assert set(needed) == set(manifest.scanners)
    assert (min(needed.values()), max(needed.values())) == (300, 600)
    verdicts = {r["group"]: r["verdict"] for r in criterion["results"]}
    assert verdicts == {s: "inconclusive" if s == "DRX Demo" else "pass" for s in verdicts}
    (drx,) = [r for r in criterion["results"] if r["group"] == "DRX Demo"]
    assert 0.07 < drx["estimate"] < 0.10 < drx["high"]
    assert (
        min(r["n"] for r in criterion["results"]) >= 240 and max(r["n"] for r in criterion["results"]) < 600
    )
    assert evaluation["verdict"] == "inconclusive"
    assert evaluation["planning"]["n_simulations"] == 100 and evaluation["planning"]["target_power"] == 0.8
