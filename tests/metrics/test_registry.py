"""The metric registry: each entry against an independent reference, the lists derived from it, and no
metric name written out anywhere else in ``src/sitecal``."""

from __future__ import annotations

import ast
import math
import re
import typing
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import relplot
import torch
from netcal.metrics import ECE as NetcalECE
from scipy.optimize import minimize
from scipy.special import expit, logit
from sklearn.metrics import accuracy_score, brier_score_loss, log_loss, roc_auc_score
from torchmetrics.functional.classification import multiclass_calibration_error

from sitecal.errors import DataError
from sitecal.metrics import METRIC_NAMES, softmax
from sitecal.metrics.registry import METRICS, SMOOTH_ECE, Metric, metric, metric_statistic, names

SRC = Path(__file__).resolve().parents[2] / "src" / "sitecal"
ALL = [m.name for m in METRICS]

# -- independent references: loops over bins written from the definitions, or another library --

Reference = Callable[[np.ndarray, np.ndarray, int], float]


def _width_bin(value: float, n_bins: int) -> int:
    """Bin of ``value`` among ``n_bins`` equal-width bins (lo, hi], 0 in the first."""
    return min(max(math.ceil(value * n_bins) - 1, 0), n_bins - 1)


def _mass_bins(values: np.ndarray, n_bins: int) -> list[int]:
    """Equal-mass bins: inner edges the ceil(k N / B)-th smallest values, bins (lo, hi], ties together."""
    ordered = sorted(values.tolist())
    n = len(ordered)
    edges = [0.0, *(ordered[math.ceil(k * n / n_bins) - 1] for k in range(1, n_bins)), 1.0]
    return [next(b for b in range(n_bins) if v <= edges[b + 1]) for v in values.tolist()]


def _top_label(probs: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return probs.max(axis=1), (probs.argmax(axis=1) == labels).astype(float)


def _binned_gaps(
    conf: np.ndarray, correct: np.ndarray, bins: list[int], n_bins: int
) -> list[tuple[int, float]]:
    """(count, sum of correct - sum of confidence) per non-empty bin."""
    out = []
    for b in range(n_bins):
        sel = [i for i, k in enumerate(bins) if k == b]
        if sel:
            out.append((len(sel), float(sum(correct[i] - conf[i] for i in sel))))
    return out


def _ece_loop(probs: np.ndarray, labels: np.ndarray, n_bins: int, *, mass: bool = False) -> float:
    conf, correct = _top_label(probs, labels)
    bins = _mass_bins(conf, n_bins) if mass else [_width_bin(v, n_bins) for v in conf.tolist()]
    return sum(abs(gap) for _, gap in _binned_gaps(conf, correct, bins, n_bins)) / len(conf)


def _ece_netcal(probs: np.ndarray, labels: np.ndarray, n_bins: int) -> float:
    loop = _ece_loop(probs, labels, n_bins)
    if probs.shape[1] == 2:  # netcal bins the positive class's probability for two classes, not the top label
        return loop
    reference = float(NetcalECE(bins=n_bins).measure(probs, labels))
    assert reference == pytest.approx(loop, abs=1e-9)  # the two references agree
    return reference


def _classwise_loop(probs: np.ndarray, labels: np.ndarray, n_bins: int) -> float:
    per_class = []
    for k in range(probs.shape[1]):
        p, hit = probs[:, k], (labels == k).astype(float)
        bins = [_width_bin(v, n_bins) for v in p.tolist()]
        per_class.append(sum(abs(gap) for _, gap in _binned_gaps(p, hit, bins, n_bins)) / len(p))
    return float(np.mean(per_class))


def _mce_loop(probs: np.ndarray, labels: np.ndarray, n_bins: int) -> float:
    conf, correct = _top_label(probs, labels)
    bins = [_width_bin(v, n_bins) for v in conf.tolist()]
    loop = max(abs(gap) / count for count, gap in _binned_gaps(conf, correct, bins, n_bins))
    value = multiclass_calibration_error(
        torch.tensor(probs), torch.tensor(labels), num_classes=probs.shape[1], n_bins=n_bins, norm="max"
    )
    assert float(value) == pytest.approx(loop, abs=1e-6)  # torchmetrics agrees (it sums in float32)
    return loop


def _debiased_loop(probs: np.ndarray, labels: np.ndarray, n_bins: int, *, mass: bool = False) -> float:
    """Kumar et al. (2019), unbiased_l2_ce: per bin (cbar - ybar)^2 - ybar (1 - ybar) / (n_b - 1)."""
    conf, correct = _top_label(probs, labels)
    bins = _mass_bins(conf, n_bins) if mass else [_width_bin(v, n_bins) for v in conf.tolist()]
    total = 0.0
    for b in range(n_bins):
        sel = [i for i, k in enumerate(bins) if k == b]
        if len(sel) < 2:
            continue
        ybar, cbar = correct[sel].mean(), conf[sel].mean()
        total += len(sel) / len(conf) * ((cbar - ybar) ** 2 - ybar * (1 - ybar) / (len(sel) - 1))
    return math.sqrt(max(total, 0.0))


def _event(probs: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The positive class for two classes, "the predicted class is correct" for more."""
    if probs.shape[1] == 2:
        return probs[:, 1], (labels == 1).astype(float)
    return _top_label(probs, labels)


def _logistic_scipy(probs: np.ndarray, labels: np.ndarray, *, offset: bool) -> float:
    """BFGS on the logistic log-likelihood of the event on logit(p): the slope, or (offset) the intercept."""
    p, y = _event(probs, labels)
    z = logit(np.clip(p, 1e-12, 1 - 1e-12))

    def nll(beta: np.ndarray) -> tuple[float, np.ndarray]:
        eta = beta[0] + (z if offset else beta[1] * z)
        r = expit(eta) - y
        grad = np.array([r.sum()]) if offset else np.array([r.sum(), (r * z).sum()])
        return float(np.sum(np.logaddexp(0.0, eta) - y * eta)), grad

    start = np.array([0.0]) if offset else np.array([0.0, 1.0])
    fit = minimize(nll, start, jac=True, method="BFGS", options={"gtol": 1e-11})
    return float(fit.x[0] if offset else fit.x[1])


def _auroc_sklearn(probs: np.ndarray, labels: np.ndarray, n_bins: int) -> float:
    if probs.shape[1] == 2:
        return float(roc_auc_score(labels, probs[:, 1]))
    return float(roc_auc_score(labels, probs, multi_class="ovr", average="macro"))


def _signed_gap_numpy(probs: np.ndarray, labels: np.ndarray, n_bins: int) -> float:
    """Mean top-label confidence minus accuracy, by hand (netcal and torchmetrics have no signed version)."""
    conf, correct = _top_label(probs, labels)
    return float(conf.sum() / len(conf) - correct.sum() / len(conf))


def _oe_hand(probs: np.ndarray, labels: np.ndarray, n_bins: int) -> float:
    p, y = _event(probs, labels)
    return float(y.sum() / p.sum())


# name -> (reference, absolute tolerance and where the reference comes from)
REFERENCES: dict[str, tuple[Reference, float]] = {
    "ece": (_ece_netcal, 1e-9),  # netcal's ECE, and the loop above
    "ece_mass": (lambda p, y, b: _ece_loop(p, y, b, mass=True), 1e-12),
    "classwise_ece": (_classwise_loop, 1e-12),
    "mce": (_mce_loop, 1e-12),  # and torchmetrics, norm="max"
    "ece_debiased": (_debiased_loop, 1e-12),
    "ece_debiased_mass": (lambda p, y, b: _debiased_loop(p, y, b, mass=True), 1e-12),
    "oe_ratio": (_oe_hand, 1e-12),
    "calibration_gap": (_signed_gap_numpy, 1e-12),
    # relplot (the authors' code) on the top-label (confidence, correct) pairs; it rounds to a grid and
    # resolves the bandwidth only to 2^-10: 3e-3 on errors near 0.4 (test_smooth_ece.py: 5e-4 at one width)
    "smooth_ece": (
        lambda p, y, b: float(relplot.smECE(*(np.asarray(v, float) for v in _top_label(p, y)))),
        3e-3,
    ),
    "slope": (lambda p, y, b: _logistic_scipy(p, y, offset=False), 1e-6),  # another solver
    "intercept": (lambda p, y, b: _logistic_scipy(p, y, offset=True), 1e-6),
    "auroc": (_auroc_sklearn, 1e-12),
    "nll": (lambda p, y, b: float(log_loss(y, p, labels=list(range(p.shape[1])))), 1e-12),
    "brier": (  # the sum over classes, also for two (sklearn halves it there unless told not to)
        lambda p, y, b: float(brier_score_loss(y, p, labels=list(range(p.shape[1])), scale_by_half=False)),
        1e-12,
    ),
    "accuracy": (lambda p, y, b: float(accuracy_score(y, p.argmax(axis=1))), 0.0),
}


def _case(n: int, c: int, seed: int, n_bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Over-confident softmax outputs with every class present, every value off the bin edges."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, c, n)
    labels[:c] = np.arange(c)
    logits = 2.5 * rng.normal(size=(n, c))
    logits[np.arange(n), labels] += 1.0
    probs = softmax(logits)
    # where (lo, hi] and the references' [lo, hi) differ: keep every probability off the edges
    off_edge = (np.abs(probs * n_bins - np.round(probs * n_bins)) > 1e-6).all(axis=1)
    off_edge[:c] = True
    return probs[off_edge], labels[off_edge]


def test_every_metric_has_a_reference() -> None:
    missing = sorted(set(ALL) - set(REFERENCES))
    assert not missing, f"add an independent reference for {missing} to REFERENCES in {__file__}"
    assert not set(REFERENCES) - set(ALL)


@pytest.mark.parametrize(("n", "c", "seed", "n_bins"), [(400, 2, 0, 15), (600, 3, 1, 10), (300, 5, 2, 7)])
@pytest.mark.parametrize("name", ALL)
def test_registry_function_equals_its_reference(name: str, n: int, c: int, seed: int, n_bins: int) -> None:
    probs, labels = _case(n, c, seed, n_bins)
    reference, tolerance = REFERENCES[name]
    assert metric(name)(probs, labels, n_bins=n_bins) == pytest.approx(
        reference(probs, labels, n_bins), abs=tolerance, rel=0
    )


@pytest.mark.parametrize("name", METRIC_NAMES)
def test_the_weighted_form_under_unit_weights_is_the_function(name: str) -> None:
    probs, labels = _case(300, 3, 4, 10)
    value = metric_statistic(name, n_bins=10)(probs, labels, weights=np.ones((1, len(labels))))[0]
    # the weighted smooth ECE: binned on the exact function's grid (tests/metrics/test_smooth_weighted.py)
    tolerance = 1e-5 if name == SMOOTH_ECE.name else 1e-12
    assert value == pytest.approx(metric(name)(probs, labels, n_bins=10), abs=tolerance)


# -- the registry's shape and the lists read from it --


def test_names_are_unique_identifiers_and_labels_are_set() -> None:
    assert len(set(ALL)) == len(ALL)
    for m in METRICS:
        assert re.fullmatch(r"[a-z][a-z0-9_]*", m.name), m.name
        assert m.label and m.description and m.description[0].islower() and not m.description.endswith(".")


def test_filters_and_flags() -> None:
    assert names() == tuple(ALL)
    assert names(reported=True) == ("ece", "ece_debiased", "smooth_ece", "nll", "brier", "accuracy")
    assert names(default=True) == ("ece", "ece_debiased", "nll", "brier", "accuracy")
    # a criterion's metric is evaluated per group: reported, or from the recalibration analysis; the
    # plug-in and smooth ECE are reported but not judged (biased upward: their intervals do not cover)
    assert set(names(criterion=True)) == (set(names(reported=True)) | set(names(recalibration=True))) - {
        "ece",
        "smooth_ece",
    }
    assert set(names(recalibration=True)) == {"slope", "intercept", "oe_ratio"}
    # reported: the refit bootstrap evaluates it under each resample's T; gaps between groups need sums
    assert all(metric(m).refittable for m in names(reported=True))
    assert set(names(reported=True)) - set(names(summable=True)) == {"smooth_ece"}
    assert set(names(summable=True)) <= set(names(bootstrappable=True)) == set(METRIC_NAMES)
    assert METRIC_NAMES == names(bootstrappable=True)
    assert {m.name for m in METRICS if m.direction == "higher"} == {"accuracy", "auroc"}
    # compared between groups: a sum of per-study terms without a clamped root; signed ones two-sided
    assert names(comparable=True) == ("ece", "calibration_gap", "oe_ratio", "nll", "brier", "accuracy")
    assert all(metric(m).summable and not metric(m).squared for m in names(comparable=True))
    assert {m for m in names(comparable=True) if metric(m).direction == "target"} == {
        "calibration_gap",
        "oe_ratio",
    }
    assert metric("Brier").label == "Brier score"  # names match case-insensitively, as options do


def test_unknown_name_is_refused_with_a_guess() -> None:
    with pytest.raises(DataError, match=re.escape("The 'name' parameter of metric must be one of 'ece', ")):
        metric("eec")
    with pytest.raises(DataError, match=re.escape("Got 'brierr'. Did you mean 'brier'?")):
        metric("brierr")
    with pytest.raises(ValueError, match="has no weighted form"):
        metric("auroc").statistic()


@pytest.mark.parametrize(
    ("changes", "needs"),
    [
        ({"criterion": True}, "reported=True or recalibration=True when criterion=True"),
        ({"reported": True}, "a sum form (weighted=SumForm) or a statistic with evaluate_each when reported"),
        ({"default": True}, "reported=True when default=True"),
        ({"direction": "target"}, "a target exactly when the direction is 'target'"),
        ({"bounds": (1.0, 0.0)}, "bounds (low, high) with low <= high"),
        ({"comparable": True}, "a sum form (weighted=SumForm) and squared=False when comparable"),
    ],
)
def test_an_inconsistent_entry_is_refused_at_import(changes: dict[str, object], needs: str) -> None:
    fields = {
        "name": "new",
        "label": "New",
        "function": lambda p, y, b: 0.0,
        "direction": "lower",
        "description": "a new metric",
        "bounds": (0.0, 1.0),
    }
    with pytest.raises(ValueError, match=re.escape(f"Metric 'new' needs {needs}")):
        Metric(**(fields | changes))  # type: ignore[arg-type]


def test_the_consumers_read_the_registry() -> None:
    from sitecal.evaluation._sensitivity import LOSO_METRICS
    from sitecal.protocol import EvaluationSettings
    from sitecal.protocol._base import CriterionMetricName, DisparityMetricName, MetricName
    from sitecal.report._context import Context
    from sitecal.stats import DEFAULT_METRICS

    assert typing.get_args(MetricName) == names(reported=True)
    assert typing.get_args(CriterionMetricName) == names(criterion=True)
    # disparity_metrics: the comparable names, and the reported ones the schema refuses with a reason
    assert typing.get_args(DisparityMetricName) == tuple(
        m for m in ALL if m in names(comparable=True) + names(reported=True)
    )
    assert tuple(EvaluationSettings().metrics) == names(default=True) == DEFAULT_METRICS == LOSO_METRICS
    for m in METRICS:
        assert Context.metric_name(m.name) == m.label
        assert Context.lower_is_better(m.name) == (m.direction != "higher")


# -- no metric name written out in src/sitecal outside the registry --

# Literals equal to a metric name that are not that metric: the file (relative to src/sitecal), the
# names, and why. Anything else is a list or a dispatch that belongs in the registry.
NOT_METRIC_NAMES: dict[str, tuple[set[str], str]] = {
    "metrics/_calibration_error.py": ({"accuracy"}, "ReliabilityCurve's per-bin accuracy field"),
    "report/figures.py": ({"accuracy"}, "the reliability curve's per-bin accuracy field"),
    "report/_same_groups.py": ({"accuracy"}, "the reliability curve's per-bin accuracy field"),
    "evaluation/_group_intervals.py": ({"accuracy"}, "the reliability curve's per-bin accuracy field"),
    "metrics/_clinical.py": ({"slope", "intercept"}, "fields of CalibrationSlopeIntercept.to_dict"),
    "metrics/_recalibration.py": (
        {"slope", "intercept"},
        "RecalibrationStatistic's own two names: the top-label logistic fit's parameters",
    ),
    "evaluation/_recalibration_groups.py": (
        {"slope", "intercept"},
        "fields of the recalibration document (one logistic fit gives slope, intercept and O/E)",
    ),
    "evaluation/_sensitivity.py": ({"oe_ratio"}, "a field of the heterogeneity document's rows"),
    "report/_sensitivity.py": (
        {"slope", "intercept", "oe_ratio"},
        "the same fields, read back from the document",
    ),
    # the monitor's tests are of three kinds, one of them named "accuracy" (results.TestKind)
    "results/_monitoring.py": ({"accuracy"}, "a kind of monitoring test (TestKind)"),
    "monitor/_tests.py": ({"accuracy"}, "a kind of monitoring test"),
    "report/_monitoring_words.py": ({"accuracy"}, "a kind of monitoring test, and its words"),
    "run/_mlflow_content.py": ({"ece"}, "the ece section of evaluation.json (its binning), logged as params"),
}


def metric_literals(source: str, metric_names: set[str]) -> list[tuple[int, str]]:
    """(line, name) of every string constant equal to a metric name, outside docstrings, ``__all__``,
    f-strings and ``func`` (the name of a Python function in error messages, e.g. ``func="accuracy"``)."""
    tree = ast.parse(source)
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):  # docstrings
            skip.add(id(node.value))
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id in ("__all__", "func") for t in node.targets
        ):
            skip.update(id(n) for n in ast.walk(node.value))
        elif isinstance(node, ast.keyword) and node.arg == "func":
            skip.update(id(n) for n in ast.walk(node.value))
        elif isinstance(node, ast.JoinedStr):  # pieces of an f-string: words of a message
            skip.update(id(n) for n in node.values)
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value in metric_names
        and id(node) not in skip
    ]


def test_the_literal_check_finds_a_name_and_skips_docstrings() -> None:
    source = '''
"""Module docstring naming "ece"."""
__all__ = ["accuracy"]
DEFAULTS = ("ece", "nll")
def f(x):
    """ece"""
    check(x, func="accuracy")
    return {"brier": x}[x] if x != f"{x}ece" else "not ece"
'''
    assert metric_literals(source, set(ALL)) == [(4, "ece"), (4, "nll"), (8, "brier")]


def test_no_metric_name_literal_outside_the_registry() -> None:
    found = []
    used: dict[str, set[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel == "metrics/registry.py":
            continue
        allowed = NOT_METRIC_NAMES.get(rel, (set(), ""))[0]
        for line, name in metric_literals(path.read_text(encoding="utf-8"), set(ALL)):
            if name in allowed:
                used.setdefault(rel, set()).add(name)
            else:
                found.append(f"{rel}:{line}: {name!r}")
    assert not found, (
        "metric names written out: read them from sitecal.metrics.registry (metric(), names(), ECE.name, ...)"
        " or, if the string is not the metric, add it to NOT_METRIC_NAMES with the reason:\n"
        + "\n".join(found)
    )
    stale = {rel: listed - used.get(rel, set()) for rel, (listed, _) in NOT_METRIC_NAMES.items()}
    assert not any(stale.values()), f"NOT_METRIC_NAMES lists literals no longer there: {stale}"
