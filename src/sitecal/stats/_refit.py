"""``refit_bootstrap``: intervals of calibrated metrics that include the uncertainty of the temperature.

Each resample ``b`` draws fit-split patients and, independently, evaluation-split patients; it fits
``T_b`` on the resampled fit split (all ``B`` fits in one batched solve, see
:mod:`sitecal.calibration._batched`), applies it to the resampled evaluation split and computes the
metrics there, before and after calibration, on the same evaluation resample (paired).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sitecal._validation import check_int, check_labels, check_logits, check_option
from sitecal.calibration import DEFAULT_BOUNDS, BatchedTemperatureSolver, TemperatureFit
from sitecal.errors import DataError
from sitecal.metrics import METRIC_NAMES, SumMetricStatistic, metric_statistic, softmax
from sitecal.stats._intervals import interval_result
from sitecal.stats._metric_intervals import DEFAULT_METRICS
from sitecal.stats._resample import CHUNK_ELEMENTS, ClusterPlan, Draws, draw_chunks, make_evaluator, make_plan
from sitecal.stats._spec import BootstrapResult, BootstrapSpec

__all__ = ["RefitIntervals", "bootstrap_temperature", "fit_stream_seed", "refit_bootstrap"]

PROB_SETS = ("before", "after")


def fit_stream_seed(seed: int) -> int:
    """Seed of the fit split's resampling stream, derived from ``spec.seed`` (independent of it).

    The evaluation split is resampled from ``numpy.random.default_rng(seed)`` itself, exactly as
    :func:`~sitecal.stats.bootstrap_metrics` would; the fit split from
    ``default_rng(fit_stream_seed(seed))``, with ``SeedSequence(seed).spawn``'s first child's state.
    """
    child = np.random.SeedSequence(seed).spawn(1)[0]
    return int(child.generate_state(1, np.uint64)[0] >> np.uint64(1))


def _readonly(a: NDArray[Any]) -> NDArray[Any]:
    a.setflags(write=False)
    return a


def _result(
    estimate: float,
    replicates: NDArray[np.float64],
    jackknife: NDArray[np.float64] | None,
    *,
    spec: BootstrapSpec,
    plan: ClusterPlan,
    note: str = "",
) -> BootstrapResult:
    return interval_result(
        estimate,
        replicates,
        jackknife,
        spec=spec,
        n=plan.n,
        n_clusters=plan.n_clusters,
        n_strata=plan.n_strata,
        note=note,
    )


@dataclass(frozen=True, eq=False)
class RefitIntervals:
    """Intervals of metrics before and after a temperature refitted in every resample.

    Attributes
    ----------
    metrics : tuple of str
    prob_sets : ("before", "after")
    spec : BootstrapSpec
    n_bins : int
    fit : TemperatureFit
        The temperature fitted on the whole fit split (the point estimate).
    fit_plan, eval_plan : ClusterPlan
        Rows, clusters and strata of each split.
    log_temperature_replicates : numpy.ndarray, shape (B,)
        ``s_b = log T_b``. Read-only.
    log_temperature_jackknife : numpy.ndarray or None, shape (fit clusters,)
        Leave-one-fit-cluster-out ``log T`` (BCa only).
    estimates, replicates : numpy.ndarray
        Shapes (M, 2) and (M, 2, B), indexed like ``metrics`` and ``prob_sets``. Read-only.
    jackknife : numpy.ndarray or None
        (M, 2, J) scaled influence values for BCa's acceleration (see :func:`refit_bootstrap`).
    n_exact : int
        Resamples whose ``T_b`` came from the exact solver rather than the certified surrogate.
    n_at_bound : int
        Resamples whose fit stopped on a bound of T.
    max_error_bound : float
        Largest certified bound on ``|log T_b - log T_b*|`` over the resamples.
    """

    metrics: tuple[str, ...]
    prob_sets: tuple[str, ...]
    spec: BootstrapSpec
    n_bins: int
    fit: TemperatureFit
    fit_plan: ClusterPlan
    eval_plan: ClusterPlan
    log_temperature_replicates: NDArray[np.float64]
    log_temperature_jackknife: NDArray[np.float64] | None
    estimates: NDArray[np.float64]
    replicates: NDArray[np.float64]
    jackknife: NDArray[np.float64] | None
    n_exact: int
    n_at_bound: int
    max_error_bound: float

    def _bound_note(self) -> str:
        if not self.n_at_bound:
            return ""
        return f"{self.n_at_bound} of {self.spec.n_resamples} resampled fits stopped on a bound of T."

    @property
    def log_temperature(self) -> BootstrapResult:
        """Interval of ``log T`` (fit split's sizes)."""
        return _result(
            self.fit.log_temperature,
            self.log_temperature_replicates,
            self.log_temperature_jackknife,
            spec=self.spec,
            plan=self.fit_plan,
            note=self._bound_note(),
        )

    @property
    def temperature(self) -> BootstrapResult:
        """Interval of ``T`` (the exponential of the log T interval's replicates)."""
        jk = self.log_temperature_jackknife
        return _result(
            self.fit.temperature,
            np.exp(self.log_temperature_replicates),
            None if jk is None else np.exp(jk),
            spec=self.spec,
            plan=self.fit_plan,
            note=self._bound_note(),
        )

    def _index(self, metric: str, prob_set: str, func: str) -> tuple[int, int]:
        m = check_option(metric, name="metric", func=func, options=self.metrics)
        p = check_option(prob_set, name="prob_set", func=func, options=self.prob_sets)
        return self.metrics.index(m), self.prob_sets.index(p)

    def get(self, metric: str, prob_set: str) -> BootstrapResult:
        """Interval of ``metric`` on ``"before"`` or ``"after"`` (evaluation split's sizes)."""
        i, j = self._index(metric, prob_set, "RefitIntervals.get")
        jk = None if self.jackknife is None else self.jackknife[i, j]
        return _result(
            float(self.estimates[i, j]), self.replicates[i, j], jk, spec=self.spec, plan=self.eval_plan
        )

    def difference(self, metric: str, a: str = "after", b: str = "before") -> BootstrapResult:
        """Interval of ``metric(a) - metric(b)`` from the paired replicates."""
        i, ja = self._index(metric, a, "RefitIntervals.difference")
        _, jb = self._index(metric, b, "RefitIntervals.difference")
        jk = None if self.jackknife is None else self.jackknife[i, ja] - self.jackknife[i, jb]
        return _result(
            float(self.estimates[i, ja] - self.estimates[i, jb]),
            self.replicates[i, ja] - self.replicates[i, jb],
            jk,
            spec=self.spec,
            plan=self.eval_plan,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict: spec, split sizes, the fit, T and log T intervals, metrics and differences."""
        sizes = {
            name: {"n": p.n, "n_clusters": p.n_clusters, "n_strata": p.n_strata}
            for name, p in (("fit", self.fit_plan), ("eval", self.eval_plan))
        }
        return {
            "spec": self.spec.to_dict(),
            "fit_stream_seed": fit_stream_seed(self.spec.seed),
            "n_bins": self.n_bins,
            "splits": sizes,
            "fit": self.fit.to_dict(),
            "temperature": self.temperature.to_dict(),
            "log_temperature": self.log_temperature.to_dict(),
            "n_exact": self.n_exact,
            "n_at_bound": self.n_at_bound,
            "max_error_bound": self.max_error_bound,
            "intervals": {m: {p: self.get(m, p).to_dict() for p in self.prob_sets} for m in self.metrics},
            "differences": {m: {"after - before": self.difference(m).to_dict()} for m in self.metrics},
        }


def _split(
    logits: ArrayLike, labels: ArrayLike, clusters: ArrayLike | None, strata: ArrayLike | None, which: str
) -> tuple[NDArray[np.float64], NDArray[np.int64], ClusterPlan]:
    func = "refit_bootstrap"
    z = check_logits(logits, func=func, name=f"{which}_logits")
    y = check_labels(labels, n=z.shape[0], n_classes=z.shape[1], func=func, name=f"{which}_labels")
    plan = make_plan(z.shape[0], clusters, strata, func=f"{func} ({which} split)")
    return z, y, plan


def _after_metrics(
    statistics: Sequence[SumMetricStatistic],
    logits: NDArray[np.float64],
    labels: NDArray[np.int64],
    s: NDArray[np.float64],
    row_weights: NDArray[np.float64],
) -> NDArray[np.float64]:
    """Metrics of ``softmax(logits / exp(s_b))`` under row weights (R, N), per resample: (M, R).

    Chunked so that the (resamples x rows x classes) probabilities stay near ``CHUNK_ELEMENTS``.
    """
    n, c = logits.shape
    r = s.shape[0]
    step = max(1, CHUNK_ELEMENTS // max(n * c, 1))
    out = np.empty((len(statistics), r))
    tiled_labels = np.tile(labels, min(step, r))
    for start in range(0, r, step):  # a loop over chunks of resamples
        sl = slice(start, min(r, start + step))
        size = sl.stop - sl.start
        temps = np.repeat(np.exp(s[sl]), n)
        probs = softmax(np.tile(logits, (size, 1)), temperature=temps)
        for i, stat in enumerate(statistics):  # a loop over metrics
            terms = stat.row_terms(probs, tiled_labels[: size * n]).reshape(size, n, -1)
            sums = np.empty((size, terms.shape[2]))
            for j in range(terms.shape[2]):  # a loop over sufficient-statistic columns
                sums[:, j] = np.multiply(row_weights[sl], terms[:, :, j]).sum(axis=1)
            out[i, sl] = stat.from_sums(sums)
    return out


def _statistics(metrics: Sequence[str], n_bins: int) -> tuple[tuple[str, ...], list[SumMetricStatistic]]:
    func = "refit_bootstrap"
    if isinstance(metrics, str):
        raise DataError(f"The 'metrics' parameter of {func} must be a sequence of names, e.g. ('ece',).")
    names = tuple(check_option(m, name="metrics", func=func, options=METRIC_NAMES) for m in metrics)
    if not names or len(set(names)) != len(names):
        raise DataError(
            f"The 'metrics' parameter of {func} must list each metric once. Got {tuple(metrics)!r}."
        )
    bins = check_int(n_bins, name="n_bins", func=func, minimum=1)
    stats: list[SumMetricStatistic] = []
    for m in names:
        stat = metric_statistic(m, n_bins=bins)
        if not isinstance(stat, SumMetricStatistic):
            raise DataError(
                f"The 'metrics' parameter of {func} must name metrics with fixed bins; {m!r} recomputes its "
                "bins per resample and is not supported here. Use 'ece' (equal-width) instead."
            )
        stats.append(stat)
    return names, stats


def _chunks(plan: ClusterPlan, seed: int, spec: BootstrapSpec, chunk: int) -> Iterator[Draws]:
    return draw_chunks(plan, seed=seed, n_resamples=spec.n_resamples, chunk_size=chunk)


def refit_bootstrap(
    fit_logits: ArrayLike,
    fit_labels: ArrayLike,
    eval_logits: ArrayLike,
    eval_labels: ArrayLike,
    *,
    fit_clusters: ArrayLike | None,
    eval_clusters: ArrayLike | None,
    fit_strata: ArrayLike | None = None,
    eval_strata: ArrayLike | None = None,
    metrics: Sequence[str] = DEFAULT_METRICS,
    n_bins: int = 15,
    bounds: tuple[float, float] = DEFAULT_BOUNDS,
    spec: BootstrapSpec | None = None,
) -> RefitIntervals:
    r"""Bootstrap the whole fit-then-evaluate procedure of temperature scaling.

    Parameters
    ----------
    fit_logits, fit_labels : array_like, shapes (N_f, C) and (N_f,)
        The split the temperature is fitted on.
    eval_logits, eval_labels : array_like, shapes (N_e, C) and (N_e,)
        The held-out split the metrics are computed on.
    fit_clusters, eval_clusters : array_like or None
        Patient of each row of each split (required keywords; None: each row its own cluster).
    fit_strata, eval_strata : array_like, optional
        Resampling strata of each split (clusters nest in strata).
    metrics : sequence of str, default ("ece", "nll", "brier", "accuracy")
        Metrics with fixed bins from :data:`sitecal.metrics.METRIC_NAMES` (not ``"ece_mass"``).
    n_bins : int, default 15
    bounds : (float, float), default (0.05, 100.0)
        Bounds of T, as in :func:`~sitecal.calibration.fit_temperature`.
    spec : BootstrapSpec, optional
        Default ``BootstrapSpec()``.

    Returns
    -------
    RefitIntervals
        ``.temperature`` / ``.log_temperature`` (fit split's sizes), ``.get(metric, "before" | "after")``,
        ``.difference(metric, "after", "before")`` (evaluation split's sizes), ``.to_dict()``.

    Notes
    -----
    Resample ``b`` draws fit-split cluster weights ``u_b`` (stream ``fit_stream_seed(spec.seed)``) and,
    independently, evaluation-split weights ``v_b`` (stream ``spec.seed``, the one
    :func:`bootstrap_metrics` uses, so the "before" replicates equal its replicates on the evaluation
    split), and computes

    .. math:: \hat s_b = \arg\min_s \frac{\sum_i u_{b,i}\, \ell_i(s)}{\sum_i u_{b,i}}, \qquad
              \theta_b = m\bigl(\mathrm{softmax}(z^{e} / e^{\hat s_b});\ v_b\bigr),

    with ``ell_i`` the NLL of fit row ``i`` at ``T = e^s``. ``T_b`` equals ``fit_temperature`` on the
    resampled rows (rows repeated by their weights) to a certified ``|log T_b - log T_b*| <= 1e-9``
    (see ``max_error_bound``). The evaluation metrics use the per-resample probabilities, computed a
    chunk of resamples at a time. Results are bit-for-bit the same for any ``spec.chunk_size``.

    BCa: the acceleration of ``T`` uses the exact leave-one-fit-cluster-out fits. For a metric
    after calibration, which depends on both splits, it uses the two-sample form
    :math:`a = \sum U^3 / (6 (\sum U^2)^{3/2})` over the influence values of both splits (Efron &
    Tibshirani 1993, 14.3): :math:`U = (K - 1)(\bar\theta_{(\cdot)} - \theta_{(k)})` from the
    leave-one-evaluation-cluster-out values at the full-data T, and for the fit split the change of
    ``s`` times a central difference of the metric in ``s`` (step: the bootstrap SE of ``s``).

    References
    ----------
    C. Guo et al. "On Calibration of Modern Neural Networks." ICML 2017. B. Efron, R. Tibshirani. An
    Introduction to the Bootstrap, 1993.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> z = rng.normal(size=(400, 3)) * 3.0
    >>> y = (np.exp(z / 2) / np.exp(z / 2).sum(1, keepdims=True)).cumsum(1).__gt__(
    ...     rng.random((400, 1))).argmax(1)
    >>> res = refit_bootstrap(z[:200], y[:200], z[200:], y[200:], fit_clusters=None, eval_clusters=None,
    ...                       spec=BootstrapSpec(n_resamples=200))
    >>> t = res.temperature
    >>> bool(t.low < t.estimate < t.high), res.get("accuracy", "after").estimate == res.get(
    ...     "accuracy", "before").estimate
    (True, True)
    """
    func = "refit_bootstrap"
    spec = BootstrapSpec() if spec is None else spec
    if not isinstance(spec, BootstrapSpec):
        raise DataError(f"The 'spec' parameter of {func} must be a BootstrapSpec. Got {type(spec).__name__}.")
    zf, yf, fit_plan = _split(fit_logits, fit_labels, fit_clusters, fit_strata, "fit")
    ze, ye, eval_plan = _split(eval_logits, eval_labels, eval_clusters, eval_strata, "eval")
    if zf.shape[1] != ze.shape[1]:
        raise DataError(
            f"The 'eval_logits' parameter of {func} must have as many classes as 'fit_logits' "
            f"({zf.shape[1]}). Got {ze.shape[1]}."
        )
    names, stats = _statistics(metrics, n_bins)
    solver = BatchedTemperatureSolver(
        zf, yf, fit_plan.cluster_of_row, fit_plan.n_clusters, bounds=bounds, func=func
    )
    s0 = solver.fit.log_temperature
    before_probs = softmax(ze)
    before = [make_evaluator(stat, (before_probs, ye), eval_plan) for stat in stats]
    after_at_s0 = _after_metrics(stats, ze, ye, np.array([s0]), np.ones((1, eval_plan.n)))[:, 0]
    estimates = np.stack([np.array([e.estimate() for e in before]), after_at_s0], axis=1)

    b = spec.n_resamples
    chunk = spec.chunk_size or max(
        1, min(b, CHUNK_ELEMENTS // max(fit_plan.n_clusters, eval_plan.n_clusters))
    )
    s_rep = np.empty(b)
    replicates = np.empty((len(names), 2, b))
    n_exact = n_bound = 0
    max_err = 0.0
    start = 0
    streams = zip(
        _chunks(fit_plan, fit_stream_seed(spec.seed), spec, chunk),
        _chunks(eval_plan, spec.seed, spec, chunk),
        strict=True,
    )
    for fit_draws, eval_draws in streams:  # a loop over chunks of resamples
        stop = start + fit_draws.size
        sol = solver.solve(fit_draws.weights)
        s_rep[start:stop] = sol.log_temperature
        n_exact += int(sol.exact.sum())
        n_bound += int(np.count_nonzero(sol.bound))
        max_err = max(max_err, float(sol.error_bound.max()))
        for i, evaluator in enumerate(before):  # a loop over metrics
            replicates[i, 0, start:stop] = evaluator.replicates(eval_draws)
        replicates[:, 1, start:stop] = _after_metrics(
            stats, ze, ye, sol.log_temperature, eval_draws.weights[:, eval_plan.cluster_of_row]
        )
        start = stop

    s_jack = jackknife = None
    if spec.method == "bca":
        s_jack, jackknife = _bca_influence(solver, stats, ze, ye, eval_plan, before_probs, s_rep)
    return RefitIntervals(
        metrics=names,
        prob_sets=PROB_SETS,
        spec=spec,
        n_bins=stats[0].n_bins,
        fit=solver.fit,
        fit_plan=fit_plan,
        eval_plan=eval_plan,
        log_temperature_replicates=_readonly(s_rep),
        log_temperature_jackknife=s_jack,
        estimates=_readonly(estimates),
        replicates=_readonly(replicates),
        jackknife=jackknife,
        n_exact=n_exact,
        n_at_bound=n_bound,
        max_error_bound=max_err,
    )


def _bca_influence(
    solver: BatchedTemperatureSolver,
    stats: Sequence[SumMetricStatistic],
    ze: NDArray[np.float64],
    ye: NDArray[np.int64],
    eval_plan: ClusterPlan,
    before_probs: NDArray[np.float64],
    s_rep: NDArray[np.float64],
) -> tuple[NDArray[np.float64] | None, NDArray[np.float64] | None]:
    """Jackknife log T and the two-sample scaled influence values of each metric (see refit_bootstrap)."""
    s0 = solver.fit.log_temperature
    k_fit = solver.jackknife().log_temperature if solver.n_clusters > 1 else None
    if k_fit is None or eval_plan.n_clusters < 2:
        return k_fit, None
    s_jack = _readonly(k_fit)
    after_probs = softmax(ze, temperature=math.exp(s0))
    m = len(stats)
    eval_part = np.empty((m, 2, eval_plan.n_clusters))
    for i, stat in enumerate(stats):  # a loop over metrics
        for j, probs in enumerate((before_probs, after_probs)):
            jk = make_evaluator(stat, (probs, ye), eval_plan).jackknife(1)
            eval_part[i, j] = (eval_plan.n_clusters - 1) * (jk - jk.mean())
    h = max(float(np.std(s_rep, ddof=1)), 1e-6)
    ends = _after_metrics(stats, ze, ye, np.array([s0 - h, s0 + h]), np.ones((2, eval_plan.n)))
    slope = (ends[:, 1] - ends[:, 0]) / (2.0 * h)  # (M,)
    ds = (solver.n_clusters - 1) * (s_jack - s_jack.mean())
    fit_part = np.zeros((m, 2, ds.shape[0]))
    fit_part[:, 1] = slope[:, None] * ds[None, :]
    return s_jack, _readonly(np.concatenate([eval_part, fit_part], axis=2))


def bootstrap_temperature(
    logits: ArrayLike,
    labels: ArrayLike,
    *,
    clusters: ArrayLike | None,
    strata: ArrayLike | None = None,
    bounds: tuple[float, float] = DEFAULT_BOUNDS,
    spec: BootstrapSpec | None = None,
) -> RefitIntervals:
    """Bootstrap interval of the fitted temperature alone (no evaluation split).

    The same resamples of the fit rows as :func:`refit_bootstrap` with these rows as its fit split
    (stream ``fit_stream_seed(spec.seed)``); the result has no metrics (``metrics == ()``), so use
    ``.temperature`` and ``.log_temperature``.

    Parameters
    ----------
    logits : array_like, shape (N, C)
    labels : array_like, shape (N,)
    clusters : array_like of shape (N,) or None
    strata : array_like of shape (N,), optional
    bounds : (float, float), default (0.05, 100.0)
    spec : BootstrapSpec, optional

    Returns
    -------
    RefitIntervals

    Examples
    --------
    >>> rng = np.random.default_rng(1)
    >>> z = rng.normal(size=(500, 2)) * 2.0
    >>> y = (rng.random(500) < 1 / (1 + np.exp(-(z[:, 1] - z[:, 0]) / 2.0))).astype(int)
    >>> res = bootstrap_temperature(z, y, clusters=None, spec=BootstrapSpec(n_resamples=300))
    >>> bool(res.temperature.low < 2.0 < res.temperature.high)
    True
    """
    func = "bootstrap_temperature"
    spec = BootstrapSpec() if spec is None else spec
    if not isinstance(spec, BootstrapSpec):
        raise DataError(f"The 'spec' parameter of {func} must be a BootstrapSpec. Got {type(spec).__name__}.")
    z = check_logits(logits, func=func)
    y = check_labels(labels, n=z.shape[0], n_classes=z.shape[1], func=func)
    plan = make_plan(z.shape[0], clusters, strata, func=func)
    solver = BatchedTemperatureSolver(z, y, plan.cluster_of_row, plan.n_clusters, bounds=bounds, func=func)
    b = spec.n_resamples
    chunk = spec.chunk_size or max(1, min(b, CHUNK_ELEMENTS // plan.n_clusters))
    s_rep = np.empty(b)
    n_exact = n_bound = 0
    max_err = 0.0
    start = 0
    for draws in _chunks(plan, fit_stream_seed(spec.seed), spec, chunk):  # a loop over chunks
        w = draws.weights
        sol = solver.solve(w)
        s_rep[start : start + w.shape[0]] = sol.log_temperature
        n_exact += int(sol.exact.sum())
        n_bound += int(np.count_nonzero(sol.bound))
        max_err = max(max_err, float(sol.error_bound.max()))
        start += w.shape[0]
    s_jack = None
    if spec.method == "bca" and plan.n_clusters > 1:
        s_jack = _readonly(solver.jackknife().log_temperature)
    empty = np.zeros((0, 2))
    return RefitIntervals(
        metrics=(),
        prob_sets=PROB_SETS,
        spec=spec,
        n_bins=0,
        fit=solver.fit,
        fit_plan=plan,
        eval_plan=plan,
        log_temperature_replicates=_readonly(s_rep),
        log_temperature_jackknife=s_jack,
        estimates=_readonly(empty),
        replicates=_readonly(np.zeros((0, 2, b))),
        jackknife=None,
        n_exact=n_exact,
        n_at_bound=n_bound,
        max_error_bound=max_err,
    )
