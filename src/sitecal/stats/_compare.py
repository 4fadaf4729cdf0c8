"""``compare_methods``: recalibration methods against temperature scaling on held-out data, paired.

Each resample ``b`` draws fit-split patients and, independently, evaluation-split patients (the same
streams as :func:`~sitecal.stats.refit_bootstrap`, so the temperature arm's replicates are that
function's "after" replicates), refits every method on the resampled fit split, and measures each on
the same resampled evaluation split. A method's difference from temperature scaling is then paired: both
arms saw the same patients in every resample, and the interval of the difference includes both fits'
uncertainty.

Every compared measure is lower-is-better (held-out NLL, Brier score, debiased and smooth ECE), so a
method is *better* when the whole interval of its difference lies below zero, *worse* when it lies above,
and otherwise the difference is within resampling noise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sitecal.calibration import METHODS, FittedMethod, fit_method
from sitecal.errors import DataError
from sitecal.metrics import SmoothECEStatistic, SumMetricStatistic, metric_statistic
from sitecal.metrics.registry import BRIER, ECE_DEBIASED, NLL, SMOOTH_ECE
from sitecal.stats._refit_result import _readonly, _result, fit_stream_seed
from sitecal.stats._resample import CHUNK_ELEMENTS, ClusterPlan, draw_chunks, make_plan
from sitecal.stats._spec import BootstrapResult, BootstrapSpec

__all__ = ["COMPARED_METRICS", "FINDINGS", "REFERENCE_METHOD", "MethodComparison", "compare_methods"]

#: The arm every other method is compared with.
REFERENCE_METHOD = "temperature"
#: Held-out measures compared (all lower-is-better): proper scores, and calibration errors whose bias does
#: not depend on the group's size.
COMPARED_METRICS = (NLL.name, BRIER.name, ECE_DEBIASED.name, SMOOTH_ECE.name)
#: What an interval of ``method - temperature`` says: lies wholly below 0, wholly above 0, straddles 0,
#: or is undefined or degenerate (non-finite replicates, or all equal: it measures no uncertainty).
FINDINGS = ("better", "worse", "no_clear_difference", "no_interval")

_Statistic = SumMetricStatistic | SmoothECEStatistic


def _measure(
    statistics: Sequence[_Statistic],
    probs: NDArray[np.float64],
    labels: NDArray[np.int64],
    row_weights: NDArray[np.float64],
) -> NDArray[np.float64]:
    """Each statistic of each resample's probabilities (R, N, C) under its row weights (R, N): (M, R)."""
    r, n, c = probs.shape
    out = np.empty((len(statistics), r))
    flat = probs.reshape(r * n, c)
    tiled = np.tile(labels, r)
    for i, stat in enumerate(statistics):  # a loop over metrics
        if isinstance(stat, SmoothECEStatistic):
            out[i] = stat.evaluate_each(probs, labels, row_weights)
            continue
        terms = stat.row_terms(flat, tiled).reshape(r, n, -1)
        out[i] = stat.from_sums(np.einsum("rn,rnj->rj", row_weights, terms))
    return out


@dataclass(frozen=True, eq=False)
class MethodComparison:
    """Held-out measures of each method with paired refit-bootstrap intervals (see :func:`compare_methods`).

    Attributes
    ----------
    methods : tuple of str
        ``"temperature"`` first, then the compared methods in the order asked.
    metrics : tuple of str
    spec : BootstrapSpec
        Percentile intervals (see :func:`compare_methods`).
    fit_plan, eval_plan : ClusterPlan
    estimates : numpy.ndarray, shape (methods, metrics)
        Each method fitted on the whole fit split, measured on the whole evaluation split.
    replicates : numpy.ndarray, shape (methods, metrics, B)
        Resample ``b``: refitted on the ``b``-th fit resample, measured on the ``b``-th evaluation resample.
    fits : Mapping of str to FittedMethod
        Each method's fit on the whole fit split.
    notes : Mapping of str to tuple of str
        Per method, the notes of its fit on the whole split, and how many resampled fits stopped before
        converging.
    options : Mapping of str to Mapping of str to Any
        Per method, the options its fits used.
    """

    methods: tuple[str, ...]
    metrics: tuple[str, ...]
    spec: BootstrapSpec
    fit_plan: ClusterPlan
    eval_plan: ClusterPlan
    estimates: NDArray[np.float64]
    replicates: NDArray[np.float64]
    fits: Mapping[str, FittedMethod]
    notes: Mapping[str, tuple[str, ...]]
    options: Mapping[str, Mapping[str, Any]]

    def _index(self, method: str, metric: str) -> tuple[int, int]:
        if method not in self.methods or metric not in self.metrics:
            raise DataError(
                f"MethodComparison has methods {self.methods} and metrics {self.metrics}; "
                f"got {method!r} and {metric!r}."
            )
        return self.methods.index(method), self.metrics.index(metric)

    def get(self, method: str, metric: str) -> BootstrapResult:
        """Interval of ``metric`` after ``method`` (the evaluation split's sizes)."""
        i, j = self._index(method, metric)
        return _result(
            float(self.estimates[i, j]), self.replicates[i, j], None, spec=self.spec, plan=self.eval_plan
        )

    def difference(self, method: str, metric: str) -> BootstrapResult:
        """Interval of ``metric(method) - metric(temperature)`` from the paired replicates."""
        i, j = self._index(method, metric)
        k = self.methods.index(REFERENCE_METHOD)
        return _result(
            float(self.estimates[i, j] - self.estimates[k, j]),
            self.replicates[i, j] - self.replicates[k, j],
            None,
            spec=self.spec,
            plan=self.eval_plan,
        )

    def finding(self, method: str, metric: str) -> str:
        """One of :data:`FINDINGS` for ``method`` against temperature scaling on ``metric``."""
        return finding_of(self.difference(method, metric))


def finding_of(difference: BootstrapResult) -> str:
    """What an interval of a lower-is-better difference says (one of :data:`FINDINGS`).

    >>> from sitecal.stats import BootstrapResult
    >>> def d(low, high):
    ...     return BootstrapResult(estimate=(low + high) / 2, low=low, high=high, level=0.95,
    ...                            method="percentile", n_resamples=100, seed=0, n=10, n_clusters=10,
    ...                            n_strata=1, standard_error=0.05, bias=0.0)
    >>> finding_of(d(-0.2, -0.01)), finding_of(d(-0.2, 0.1)), finding_of(d(0.01, 0.2))
    ('better', 'no_clear_difference', 'worse')
    """
    low, high = difference.low, difference.high
    # undefined, or degenerate (every replicate equal: one patient, or no variation), measures nothing
    if difference.reason or not (np.isfinite(low) and np.isfinite(high)):
        return "no_interval"
    if high < 0.0:
        return "better"
    if low > 0.0:
        return "worse"
    return "no_clear_difference"


def _notes(fit: FittedMethod, not_converged: int, n_resamples: int) -> tuple[str, ...]:
    """The whole split's fit notes, and how many resampled fits stopped before converging."""
    extra = (
        (f"{not_converged} of {n_resamples} resampled fits stopped before converging.",)
        if not_converged
        else ()
    )
    return (*fit.notes, *extra)


def _methods(methods: Sequence[str]) -> tuple[str, ...]:
    func = "compare_methods"
    if isinstance(methods, str):
        raise DataError(f"The 'methods' parameter of {func} must be a sequence of names, e.g. ('vector',).")
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise DataError(
            f"The 'methods' parameter of {func} names unknown methods {unknown}; known: {', '.join(METHODS)}."
        )
    if len(set(methods)) != len(methods):
        raise DataError(
            f"The 'methods' parameter of {func} must list each method once. Got {tuple(methods)!r}."
        )
    return (REFERENCE_METHOD, *(m for m in methods if m != REFERENCE_METHOD))


def _statistics(metrics: Sequence[str], n_bins: int) -> list[_Statistic]:
    stats: list[_Statistic] = []
    for name in metrics:
        stat = metric_statistic(name, n_bins=n_bins)
        if not isinstance(stat, SumMetricStatistic | SmoothECEStatistic):
            raise DataError(
                f"compare_methods cannot measure {name!r} under each resample's refitted probabilities; "
                f"use some of {', '.join(COMPARED_METRICS)}."
            )
        stats.append(stat)
    return stats


def compare_methods(
    fit_logits: ArrayLike,
    fit_labels: ArrayLike,
    eval_logits: ArrayLike,
    eval_labels: ArrayLike,
    *,
    fit_clusters: ArrayLike | None,
    eval_clusters: ArrayLike | None,
    methods: Sequence[str],
    metrics: Sequence[str] = COMPARED_METRICS,
    n_bins: int = 15,
    spec: BootstrapSpec | None = None,
    options: Mapping[str, Mapping[str, Any]] | None = None,
) -> MethodComparison:
    r"""Fit each method on the fit split, measure it on the evaluation split, paired with temperature scaling.

    Parameters
    ----------
    fit_logits, fit_labels : array_like, shapes (N_f, C) and (N_f,)
        The rows every method is fitted on.
    eval_logits, eval_labels : array_like, shapes (N_e, C) and (N_e,)
        The held-out rows every method is measured on.
    fit_clusters, eval_clusters : array_like or None
        Patient of each row (required keywords; None: each row its own patient).
    methods : sequence of str
        Methods of :data:`sitecal.calibration.METHODS` to compare; temperature scaling is always the
        first arm (the reference), whether listed or not.
    metrics : sequence of str, default COMPARED_METRICS
        Lower-is-better measures from :data:`sitecal.metrics.METRIC_NAMES` with fixed bins or none.
    n_bins : int, default 15
    spec : BootstrapSpec, optional
        Resamples, level and seed; the method must be ``"percentile"`` (BCa's acceleration would need
        every method refitted without each patient in turn).
    options : mapping, optional
        Per method, options of :func:`sitecal.calibration.fit_method`, e.g.
        ``{"histogram": {"n_bins": 10}}``.

    Returns
    -------
    MethodComparison

    Notes
    -----
    Resample ``b`` draws fit-split weights ``u_b`` from ``default_rng(fit_stream_seed(spec.seed))`` and
    evaluation-split weights ``v_b`` from ``default_rng(spec.seed)``, as :func:`refit_bootstrap` does, and
    computes for each method :math:`m` and measure :math:`L`

    .. math:: \theta_{m,b} = L\bigl(g_{m}(z^e; \hat\phi_{m,b});\ v_b\bigr), \qquad
              \hat\phi_{m,b} = \arg\min_\phi \textstyle\sum_i u_{b,i}\, \ell_i(\phi),

    so :math:`\theta_{m,b} - \theta_{\mathrm{temperature},b}` is a paired replicate of the difference.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> z = rng.normal(size=(600, 2)) * 3.0
    >>> y = (rng.random(600) < 1 / (1 + np.exp(-(z[:, 1] - z[:, 0]) / 2.0))).astype(int)
    >>> res = compare_methods(z[:300], y[:300], z[300:], y[300:], fit_clusters=None, eval_clusters=None,
    ...                       methods=("vector",), metrics=("nll",), spec=BootstrapSpec(n_resamples=100))
    >>> res.methods, res.finding("vector", "nll")
    (('temperature', 'vector'), 'no_clear_difference')
    """
    func = "compare_methods"
    spec = BootstrapSpec() if spec is None else spec
    if not isinstance(spec, BootstrapSpec):
        raise DataError(f"The 'spec' parameter of {func} must be a BootstrapSpec. Got {type(spec).__name__}.")
    if spec.method != "percentile":
        raise DataError(
            f"The 'spec' parameter of {func} must use method='percentile'; BCa's acceleration would need "
            "every method refitted without each patient in turn."
        )
    names = _methods(methods)
    metric_names = tuple(metrics)
    stats = _statistics(metric_names, n_bins)
    given = dict(options or {})
    zf, yf = np.asarray(fit_logits, dtype=np.float64), np.asarray(fit_labels)
    ze, ye = np.asarray(eval_logits, dtype=np.float64), np.asarray(eval_labels)
    fits = {m: fit_method(m, zf, yf, **given.get(m, {})) for m in names}  # validates the arrays
    ye = ye.astype(np.int64)
    if ze.ndim != 2 or ze.shape[1] != zf.shape[1] or ye.shape != (ze.shape[0],):
        raise DataError(
            f"The 'eval_logits' and 'eval_labels' parameters of {func} must have shapes (N, {zf.shape[1]}) "
            f"and (N,). Got {ze.shape} and {ye.shape}."
        )
    fit_plan = make_plan(zf.shape[0], fit_clusters, None, func=f"{func} (fit split)")
    eval_plan = make_plan(ze.shape[0], eval_clusters, None, func=f"{func} (eval split)")
    ones = np.ones((1, ze.shape[0]))
    estimates = np.stack([_measure(stats, fits[m].probabilities(ze), ye, ones)[:, 0] for m in names])

    b = spec.n_resamples
    chunk = spec.chunk_size or max(1, min(b, CHUNK_ELEMENTS // max(ze.shape[0] * ze.shape[1], 1)))
    replicates = np.empty((len(names), len(stats), b))
    not_converged = dict.fromkeys(names, 0)
    start = 0
    streams = zip(
        draw_chunks(fit_plan, seed=fit_stream_seed(spec.seed), n_resamples=b, chunk_size=chunk),
        draw_chunks(eval_plan, seed=spec.seed, n_resamples=b, chunk_size=chunk),
        strict=True,
    )
    for fit_draws, eval_draws in streams:  # a loop over chunks of resamples
        stop = start + eval_draws.size
        fit_weights = fit_draws.weights[:, fit_plan.cluster_of_row]
        eval_weights = eval_draws.weights[:, eval_plan.cluster_of_row]
        for i, m in enumerate(names):  # a loop over methods
            refit = fit_method(m, zf, yf, fit_weights, **given.get(m, {}))
            not_converged[m] += int(np.count_nonzero(~np.asarray(refit.converged)))
            replicates[i, :, start:stop] = _measure(stats, refit.probabilities(ze), ye, eval_weights)
        start = stop
    return MethodComparison(
        methods=names,
        metrics=metric_names,
        spec=spec,
        fit_plan=fit_plan,
        eval_plan=eval_plan,
        estimates=_readonly(estimates),
        replicates=_readonly(replicates),
        fits=fits,
        notes={m: _notes(fits[m], not_converged[m], b) for m in names},
        options={m: dict(fits[m].options) for m in names},
    )
