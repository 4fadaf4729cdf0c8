"""The report shows what was judged: clamped values in words, marks explained, identical groups once."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from tests.report.conftest import Parts
from tests.report.sections import render_section

from sitecal.report._acceptance import acceptance
from sitecal.report._fairness import fairness, why_not_flagged
from sitecal.report._marks import LEGEND, Marks, is_outside, near_margin
from sitecal.report._results import guide_text, results
from sitecal.report._same_groups import same_groups
from sitecal.report.figures import forest_figure


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_a_clamped_debiased_ece_is_never_printed_as_zero() -> None:
    marks = Marks()
    # the demo's Discovery XR Demo: stored estimate 0.0 = sqrt(max(D, 0)) with D < 0
    assert marks.interval({"estimate": 0.0, "low": 0.0, "high": 0.1163}, metric="ece_debiased") == (
        "< noise [0.000, 0.116]"
    )
    assert marks.interval({"estimate": 0.0, "low": 0.0, "high": 0.2}, metric="ece_debiased_mass") == (
        "< noise [0.000, 0.200]"
    )
    # a signed squared estimate, where stored, may be shown; a plug-in ECE of 0 is a number like any other
    entry = {"estimate": 0.0, "low": 0.0, "high": 0.1, "squared_estimate": -0.00123}
    assert marks.interval(entry, metric="ece_debiased", squared=True) == (
        "< noise (squared estimate -0.0012) [0.000, 0.100]"
    )
    assert marks.interval({"estimate": 0.0, "low": 0.0, "high": 0.1}, metric="ece") == "0.000 [0.000, 0.100]"
    assert marks.legend() == [LEGEND["clamped"]]
    assert "cannot distinguish the error from 0" in LEGEND["clamped"]
    assert "the upper bound of its interval is the largest error the data allow" in LEGEND["clamped"]


def test_an_estimate_outside_its_interval_is_marked_not_altered() -> None:
    # the demo's Northgate ECE after: 0.0245 below its percentile interval [0.0250, 0.0615]
    assert is_outside(0.024477, 0.024980, 0.061530) and not is_outside(0.03, 0.03, 0.06)
    marks = Marks()
    assert marks.interval({"estimate": 0.024477, "low": 0.02498, "high": 0.06153}) == "0.024 [0.025, 0.062] †"
    assert marks.interval({"estimate": -0.02, "low": -0.01, "high": 0.03}, signed=True) == (
        "-0.020 [-0.010, +0.030] †"
    )
    assert marks.legend() == [LEGEND["outside"]] and "bootstrap" in LEGEND["outside"]


def test_near_the_margin_means_closer_than_half_the_interval() -> None:
    # 0.081 [0.050, 0.129] vs 0.10: 0.019 < 0.0395; 0.016 [0.000, 0.112]: 0.084 > 0.056
    assert near_margin({"estimate": 0.081, "low": 0.05, "high": 0.129}, {"upper_margin": 0.1})
    assert not near_margin({"estimate": 0.016, "low": 0.0, "high": 0.112}, {"upper_margin": 0.1})
    assert not near_margin({"estimate": None, "low": 0.0, "high": 0.1}, {"upper_margin": 0.1})


def _group(attribute: str, name: str, n: int, digest: str | None, ece: float = 0.05) -> dict[str, Any]:
    entry: dict[str, Any] = {"attribute": attribute, "group": name, "n": n, "n_patients": n}
    if digest is not None:
        entry["membership"] = digest
    stage = {"estimate": ece, "low": ece - 0.01, "high": ece + 0.02}
    entry["metrics"] = {"ece": {"before": stage, "after": stage}}
    return entry


def test_identical_groups_are_found_by_fingerprint_and_equal_sizes_alone_prove_nothing() -> None:
    ev: dict[str, Any] = {
        "metrics": ["ece"],
        "overall": _group("overall", "All studies", 1000, "f0"),
        "subgroups": {
            "scanner": [_group("scanner", "DRX", 585, "aa"), _group("scanner", "Ysio", 415, "bb")],
            # same size as Ysio, other studies (another fingerprint): not the same group
            "site": [_group("site", "St Aldric", 585, "aa"), _group("site", "Northgate", 415, "cc")],
        },
    }
    twins = same_groups(ev)
    assert list(twins) == [("site", "St Aldric")]
    assert (twins[("site", "St Aldric")].attribute, twins[("site", "St Aldric")].group) == ("scanner", "DRX")
    assert twins[("site", "St Aldric")].basis == "membership"
    # without fingerprints and without reliability curves, equal sizes and estimates are not enough
    for gs in ev["subgroups"].values():
        for g in gs:
            del g["membership"]
    assert same_groups(ev) == {}


def test_without_a_fingerprint_the_fallback_needs_identical_curves_and_estimates(raw: Parts) -> None:
    ev = copy.deepcopy(raw["evaluation"])
    # the fixtures' Riverside site is the Philips scanner's 238 studies (make_fixtures.py puts that scanner
    # at that site alone): same n, patients, curves and estimates to 9 digits
    twins = same_groups(ev)
    assert {k: (t.attribute, t.group, t.basis) for k, t in twins.items()} == {
        ("site", "Riverside Community Clinic"): ("scanner", "Philips DigitalDiagnost C90", "statistics")
    }
    site = next(g for g in ev["subgroups"]["site"] if g["group"] == "Riverside Community Clinic")
    site["reliability"]["before"]["count"][7] += 1  # one bin differs: no longer the same
    assert same_groups(ev) == {}


def _with_debiased(parts: Parts) -> dict[str, Any]:
    """The fixtures with a debiased ECE (clamped for one scanner) judged per scanner, and fingerprints."""
    ev = parts["evaluation"]
    ev["metrics"] = ["ece", "ece_debiased"]
    groups = [ev["overall"], *[g for gs in ev["subgroups"].values() for g in gs]]
    for i, g in enumerate(groups):
        g["metrics"] = {"ece": g["metrics"]["ece"]}
        g["metrics"]["ece_debiased"] = {
            "before": {"estimate": 0.09, "low": 0.06, "high": 0.15},
            "after": {
                "estimate": 0.0 if g["group"] == "Siemens Ysio Max" else 0.03,
                "low": 0.0,
                "high": 0.11,
            },
            "difference": {"estimate": -0.06, "low": -0.1, "high": -0.01},
        }
        g.pop("reliability", None)
        g["membership"] = f"{i:016x}"
    riverside = next(g for g in ev["subgroups"]["site"] if g["group"] == "Riverside Community Clinic")
    philips = next(g for g in ev["subgroups"]["scanner"] if g["group"] == "Philips DigitalDiagnost C90")
    riverside["membership"] = philips["membership"]
    criterion = ev["acceptance"][1]
    criterion["metric"], criterion["upper_margin"] = "ece_debiased", 0.1
    for r in criterion["results"]:
        r.update(
            next(g for g in ev["subgroups"]["scanner"] if g["group"] == r["group"])["metrics"][
                "ece_debiased"
            ]["after"]
        )
    ev["acceptance"] = [criterion]
    return ev


def test_the_results_show_the_judged_metric_clamped_values_and_identical_groups_once(
    tmp_path: Path, parts: Parts
) -> None:
    ev = _with_debiased(parts)
    text = _flat(render_section(tmp_path, results, ev))
    assert "ECE (plug-in)" in text and "ECE (plug-in) is biased upward in small groups" in text
    assert "< noise [0.000, 0.110]" in text and "0.000 [0.000, 0.110]" not in text
    assert text.count("< noise: a debiased ECE clamped at 0 (its squared-error estimate was negative)") >= 1
    # the site that holds the Philips scanner's studies is shown once, with a pointer
    assert "The same 238 studies as Scanner: Philips DigitalDiagnost C90: its metrics are shown there" in text
    # one forest plot, of the judged metric, with a caption that says what is drawn
    assert "Figure 1. Debiased ECE per group before (open circle) and after (filled square)" in text
    assert (
        "Red vertical lines are the acceptance margins of the criteria on Debiased ECE "
        "(ece-after-per-scanner: below 0.1 on the value after calibration, across the rows of the scanner "
        "groups)" in text
    )
    assert "A triangle at 0 is an estimate clamped at 0" in text
    assert "vertical lines are acceptance thresholds on ECE" not in text


def test_the_forest_plot_draws_the_judged_metric_its_margin_and_clamped_values(parts: Parts) -> None:
    ev = _with_debiased(parts)
    fig = forest_figure(ev, metric="ece_debiased", same_as={("site", "Riverside Community Clinic"): "same"})
    ax = fig.axes[0]
    segments = [s for c in ax.collections for s in c.get_segments()]
    assert {s[0][0] for s in segments} == {0.1}  # the margin of the debiased-ECE criterion
    triangles = [ln for ln in ax.lines if ln.get_marker() == "<"]
    assert len(triangles) == 1 and list(triangles[0].get_xdata()) == [0.0]  # Siemens, after
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "margin 0.100 on after calibration (ece-after-per-scanner)" in labels
    assert "clamped at 0: below sampling noise" in labels
    assert [t.get_text().strip() for t in ax.texts] == ["same"]  # the twin row draws no points


def test_the_acceptance_table_prints_the_clamped_value_in_words(tmp_path: Path, parts: Parts) -> None:
    ev = _with_debiased(parts)
    text = _flat(render_section(tmp_path, acceptance, ev))
    assert "Siemens Ysio Max 259 < noise [0.000, 0.110] below 0.1" in text
    assert "< noise: a debiased ECE clamped at 0 (its squared-error estimate was negative)" in text


def test_the_methods_and_guide_no_longer_say_the_debiased_value_is_at_least_the_plug_in(
    tmp_path: Path,
) -> None:
    from sitecal.report._context import Context
    from sitecal.report._inputs import ReportInputs
    from sitecal.report._styles import make_styles, register_fonts

    evaluation = {"metrics": ["ece", "ece_debiased"], "bootstrap": {"level": 0.95}}
    ctx = Context(
        inputs=ReportInputs(evaluation, {}, {}, {"name": "t"}),
        styles=make_styles(register_fonts()),
        width=400.0,
        figures_dir=tmp_path,
    )
    text = guide_text(ctx)
    assert "at least as large" not in text
    assert "the binned l2 error bounds the binned l1 error (what ECE estimates) from above" in text
    assert "so the debiased estimate can be the lower of the two" in text


def test_an_unflagged_gap_that_excludes_0_says_why_beside_it() -> None:
    # a higher ECE gap within the size-matched variation
    assert why_not_flagged("ece", {"estimate": 0.079, "low": 0.052, "high": 0.171}, False, 0.067, 0.97) == (
        "not flagged: as random sets of its size (adjusted p 0.97)"
    )
    # an NLL gap below the size-matched reference: that side is not tested
    assert why_not_flagged("nll", {"estimate": -0.111, "low": -0.168, "high": -0.057}, False, 0.001, 1.0) == (
        "not flagged: no higher than random sets of its size (+0.001)"
    )
    # accuracy: higher is better, so only a lower gap is tested
    assert why_not_flagged("accuracy", {"estimate": 0.05, "low": 0.01, "high": 0.09}, False, 0.0, 1.0) == (
        "not flagged: no lower than random sets of its size (0.000)"
    )
    assert why_not_flagged("ece", {"estimate": 0.02, "low": -0.01, "high": 0.05}, False, 0.0, 0.5) is None
    assert why_not_flagged("ece", {"estimate": 0.05, "low": 0.01, "high": 0.09}, True, 0.0, 0.01) is None


def test_identical_groups_are_one_row_in_the_fairness_ranking(tmp_path: Path) -> None:
    def stage(gaps: dict[str, tuple[float, float, float]], flagged: set[str]) -> dict[str, Any]:
        return {
            "groups": sorted(gaps),
            "per_group": {g: {"estimate": 0.07, "low": 0.05, "high": 0.1, "n": 585} for g in gaps},
            "versus_rest": {g: {"estimate": e, "low": lo, "high": hi} for g, (e, lo, hi) in gaps.items()},
            "expected_gap": dict.fromkeys(gaps, 0.011),
            "adjusted_p": {g: 0.005 if g in flagged else 0.5 for g in gaps},
            "flagged": {g: g in flagged for g in gaps},
        }

    gaps = {"DRX": (0.051, 0.011, 0.075), "Ysio": (-0.051, -0.075, -0.011)}
    site_gaps = {"St Aldric": (0.051, 0.012, 0.077), "Northgate": (-0.051, -0.077, -0.012)}
    evaluation = {
        "metrics": ["ece"],
        "bootstrap": {"level": 0.95},
        "min_group_size": 30,
        "attribute_labels": {"scanner": "Scanner", "site": "Site"},
        "overall": _group("overall", "All studies", 1170, "00"),
        "subgroups": {
            "scanner": [_group("scanner", "DRX", 585, "aa"), _group("scanner", "Ysio", 585, "bb")],
            "site": [_group("site", "St Aldric", 585, "aa"), _group("site", "Northgate", 585, "bb")],
        },
        "disparities": {
            "scanner": {"ece": {"after": stage(gaps, {"DRX"}), "before": stage(gaps, {"DRX"})}},
            "site": {"ece": {"after": stage(site_gaps, set()), "before": stage(site_gaps, set())}},
        },
    }
    text = _flat(render_section(tmp_path, fairness, evaluation))
    assert (
        "1 Scanner: DRX = Site: St Aldric, the same 585 studies; flagged as a scanner group only 585" in text
    )
    assert "Site: St Aldric 585" not in text  # not a second row, not a second disparity
    assert "2 Scanner: Ysio = Site: Northgate, the same 585 studies" in text
    assert "Site: Northgate 585" not in text and " 3 Site" not in text
    assert "= a group of another attribute that holds the same studies, shown once on this row." in text
