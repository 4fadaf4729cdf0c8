"""evaluate() builds a typed Evaluation whose to_dict() is evaluation.json: every key, text and count as
before, every number to the last bits a CPU's BLAS kernels may move."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.results import synthetic

from sitecal.evaluation import SCHEMA_VERSION, evaluate
from sitecal.results import Evaluation, GroupResult, Note, TemperatureInterval

GOLDEN = Path(__file__).parent / "data" / "evaluation-per-scanner-refit.json"


@pytest.fixture(scope="module")
def outcomes() -> dict[str, Any]:
    return {name: synthetic.document(name) for name in synthetic.VARIANTS}


def test_the_typed_path_writes_the_bytes_the_dict_literals_wrote(outcomes: dict[str, Any]) -> None:
    # GOLDEN was written by the evaluation that built evaluation.json from dict literals (sitecal at
    # commit 1e6908a, `python -m tests.results.synthetic`), on the same synthetic data; written again on
    # purpose for schema_version 2, where the sentences became codes (notes, reasons, warnings, method
    # descriptions): a diff of the two files changes no number; and for schema_version 3, where a criterion
    # is judged on the whole interval: only 'acceptance', 'verdict' and 'schema_version' changed, and the
    # leave-one-site-out rows gained the debiased ECE (a reported metric since); then the demo protocol's
    # criterion moved to the debiased ECE (which it now reports), the disparities gained their
    # size-matched flags and the site heterogeneity moved to REML with Hartung-Knapp; the demo protocol
    # gained its slope criterion; schema_version 4 records the split's folds (null for one split); the
    # judged rows gained their planned study size (and the document its planning settings); the debiased
    # ECE's interval became the recentred one (its upper ends and the planned sizes moved), the site
    # meta-analysis's Hartung-Knapp interval gained its max(1, q) floor, and every group its membership
    # fingerprint; then the debiased ECE's interval became the studentised bootstrap (its upper ends and the
    # planned sizes moved again, nothing else)
    # Compared to 1e-12 rather than byte for byte: numpy's OpenBLAS picks its kernels by CPU (DYNAMIC_ARCH),
    # and another machine's kernels sum in another order, which moves the last bits of a least-squares
    # fit (measured: up to about 1e-15 relative; no reported digit moved)
    outcome = outcomes["per-scanner-refit"]
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    assert_same_document(json.loads(synthetic.file_text(outcome.document)), golden)
    assert_same_document(outcome.result.to_dict(), golden)
    assert synthetic.file_text(outcome.document) == synthetic.file_text(outcome.result.to_dict())


def assert_same_document(got: Any, want: Any, path: str = "") -> None:
    """Same keys, texts, counts and flags; floats equal to 1e-12 (relative, or absolute near 0)."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and sorted(got) == sorted(want), (
            f"{path}: keys {sorted(got)} != {sorted(want)}"
        )
        for key in want:
            assert_same_document(got[key], want[key], f"{path}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{path}: {len(got)} items != {len(want)}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same_document(g, w, f"{path}[{i}]")
    elif isinstance(want, float):
        assert isinstance(got, float) and got == pytest.approx(want, rel=1e-12, abs=1e-14), (
            f"{path}: {got} != {want}"
        )
    else:
        assert type(got) is type(want) and got == want, f"{path}: {got!r} != {want!r}"


def test_the_document_comparison_can_fail() -> None:
    want = {"a": [1, 0.25, "x"], "b": None}
    assert_same_document({"a": [1, 0.25 + 1e-16, "x"], "b": None}, want)
    for got in (
        {"a": [1, 0.2501, "x"], "b": None},
        {"a": [1, 0.25, "y"], "b": None},
        {"a": [1, 0.25, "x"]},
    ):
        with pytest.raises(AssertionError):
            assert_same_document(got, want)


@pytest.mark.parametrize("variant", list(synthetic.VARIANTS))
def test_from_dict_inverts_to_dict(outcomes: dict[str, Any], variant: str) -> None:
    outcome = outcomes[variant]
    doc = outcome.document
    assert isinstance(outcome.result, Evaluation)
    assert outcome.result.to_dict() == doc
    again = Evaluation.from_dict(doc)
    assert again.to_dict() == doc
    assert json.dumps(again.to_dict()) == json.dumps(doc)  # same keys in the same order
    read_back = Evaluation.from_dict(json.loads(synthetic.file_text(doc)))
    assert read_back == outcome.result
    assert doc["schema_version"] == SCHEMA_VERSION == Evaluation.SCHEMA_VERSION


def _rows(result: Evaluation) -> list[GroupResult]:
    return [result.overall, *(row for rows in result.subgroups.values() for row in rows)]


def test_the_variants_reach_the_temperature_shapes(outcomes: dict[str, Any]) -> None:
    rows = [row for o in outcomes.values() for row in _rows(o.result)]
    assert {r.temperature_source for r in rows} == {
        None,
        "own",
        "global_fallback",
        "shrunk",
        "global",
        "empirical_bayes",
    }
    assert {type(r.temperature_interval) for r in rows} == {type(None), TemperatureInterval, Note}
    assert {r.refit for r in rows} == {True, False}
    assert {r.small for r in rows} == {True, False}
    refit = outcomes["per-scanner-refit"].result
    assert refit.bootstrap.refit and refit.bootstrap.refit_scope == "scanner"
    assert refit.warnings and refit.verdict == "inconclusive"
    assert outcomes["global"].result.overall.temperature_source == "global"


def test_empirical_bayes_groups_get_the_interval_that_repeats_the_shrinkage(outcomes: dict[str, Any]) -> None:
    outcome = outcomes["empirical-bayes-refit"]
    temps = outcome.temperatures
    assert temps.fallback == "empirical_bayes" and temps.tau2 is not None
    n_fit = int(outcome.fit_mask.sum())
    for row in outcome.result.subgroups["scanner"]:
        assert row.temperature_source == "empirical_bayes" and row.refit
        assert row.temperature == temps.groups[row.group].temperature
        interval = row.temperature_interval
        assert isinstance(interval, TemperatureInterval)
        assert interval.n_fit == n_fit and interval.low < interval.estimate == row.temperature < interval.high
    # sex rows are not calibration groups: never refitted
    assert not any(r.refit for r in outcome.result.subgroups["sex"])


def test_the_document_keeps_its_key_order(outcomes: dict[str, Any]) -> None:
    doc = outcomes["per-scanner-refit"].document
    assert list(doc)[:4] == ["schema_version", "protocol", "class_names", "cohort_flow"]
    assert list(doc)[-4:] == ["sensitivity", "characteristics", "highest_confidence_errors", "planning"]
    row = doc["subgroups"]["scanner"][0]
    assert list(row) == [
        "attribute",
        "group",
        "n",
        "n_patients",
        "small",
        "temperature",
        "temperature_interval",
        "refit",
        "metrics",
        "reliability",
        "temperature_source",
        "membership",
    ]
    assert list(doc["characteristics"]["overall"]["classes"][0]) == ["class", "count", "share"]


def test_a_bad_cohort_flow_is_named_at_the_boundary() -> None:
    flow = {k: v for k, v in synthetic.FLOW.items() if k != "labelled"}
    with pytest.raises(ValueError, match=r"^evaluate\(cohort_flow=\.\.\.\): \$\.labelled: is missing"):
        evaluate(synthetic.protocol(), synthetic.data(), cohort_flow=flow, protocol_sha256="0" * 64)
