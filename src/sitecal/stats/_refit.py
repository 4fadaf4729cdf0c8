"""``refit_bootstrap``: intervals of calibrated metrics that include the uncertainty of the temperature.

Each resample ``b`` draws fit-split patients and, independently, evaluation-split patients; it fits
``T_b`` on the resampled fit split (all ``B`` fits in one batched solve, see
:mod:`sitecal.calibration._batched`), applies it to the resampled evaluation split and computes the
metrics there, before and after calibration, on the same evaluation resample (paired).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sitecal._validation import check_int, check_labels, check_logits, check_option
from sitecal.calibration import DEFAULT_BOUNDS, BatchedTemperatureSolver, fit_validated, temperature_bounds
from sitecal.errors import DataError
from sitecal.metrics import METRIC_NAMES, SmoothECEStatistic, SumMetricStatistic, metric_statistic, softmax
from sitecal.metrics.registry import ECE
from sitecal.stats._evaluators import EvaluatorSet, auto_chunk_size, make_evaluator
from sitecal.stats._metric_intervals import DEFAULT_METRICS
from sitecal.stats._refit_result import PROB_SETS, RefitIntervals, _readonly, fit_stream_seed
from sitecal.stats._replicate_table import ReplicateTable
from sitecal.stats._resample import CHUNK_ELEMENTS, ClusterPlan, Draws, draw_chunks, make_plan
from sitecal.stats._scale import check_method_for_metrics, engine_rows, resampled
from sitecal.stats._spec import BootstrapSpec
from sitecal.stats._term_sums import RefitStatistic, metrics_at_temperatures

__all__ = ["RefitIntervals", "bootstrap_temperature", "fit_stream_seed", "refit_bootstrap"]


def _split(
    logits: ArrayLike, labels: ArrayLike, clusters: ArrayLike | None, strata: ArrayLike | None, which: str
) -> tuple[NDArray[np.float64], NDArray[np.int64], ClusterPlan]:
    func = "refit_bootstrap"
    z = check_logits(logits, func=func, name=f"{which}_logits")
    y = check_labels(labels, n=z.shape[0], n_classes=z.shape[1], func=func, name=f"{which}_labels")
    plan = make_plan(z.shape[0], clusters, strata, func=f"{func} ({which} split)")
    return z, y, plan


def _statistics(metrics: Sequence[str], n_bins: int) -> tuple[tuple[str, ...], list[RefitStatistic]]:
    func = "refit_bootstrap"
    if isinstance(metrics, str):
        raise DataError(f"The 'metrics' parameter of {func} must be a sequence of names, e.g. ('ece',).")
    names = tuple(check_option(m, name="metrics", func=func, options=METRIC_NAMES) for m in metrics)
    if not names or len(set(names)) != len(names):
        raise DataError(
            f"The 'metrics' parameter of {func} must list each metric once. Got {tuple(metrics)!r}."
        )
    bins = check_int(n_bins, name="n_bins", func=func, minimum=1)
    stats: list[RefitStatistic] = []
    for m in names:
        stat = resampled(metric_statistic(m, n_bins=bins))
        if not isinstance(stat, SumMetricStatistic | SmoothECEStatistic):
            raise DataError(
                f"The 'metrics' parameter of {func} must name metrics it can evaluate under each resample's "
                f"temperature; {m!r} recomputes its bins per resample and is not supported here. Use "
                f"{ECE.name!r} (equal-width) instead."
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
    log_temperature: float | None = None,
    log_temperature_replicates: ArrayLike | None = None,
    log_temperature_jackknife: ArrayLike | None = None,
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
    metrics : sequence of str, default: the registry's default metrics (DEFAULT_METRICS)
        Metrics from :data:`sitecal.metrics.METRIC_NAMES` with fixed bins or without bins (the
        registry's ``refittable`` ones, ``"smooth_ece"`` included: not ``"ece_mass"``).
    n_bins : int, default 15
    bounds : (float, float), default (0.05, 100.0)
        Bounds of T, as in :func:`~sitecal.calibration.fit_temperature`.
    spec : BootstrapSpec, optional
        Default ``BootstrapSpec()``.
    log_temperature, log_temperature_replicates : float and array_like of shape (B,), optional
        Precomputed log temperatures, given together: the point estimate and resample ``b``'s value
        (e.g. empirical-Bayes shrunk temperatures, :func:`bootstrap_group_temperatures`), used instead
        of fitting ``T_b`` on the fit split. The fit split then only gives ``.fit`` and its sizes.
    log_temperature_jackknife : array_like, shape (J,), optional
        With precomputed temperatures and ``spec.method="bca"`` (required then): the leave-one-cluster-out
        values of the procedure that produced them, for the fit part of the acceleration.

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
    :math:`a = \sum_j \sum_k (U_{jk}/K_j)^3 / (6 (\sum_j \sum_k (U_{jk}/K_j)^2)^{3/2})` over the influence
    values of both splits, each divided by its own cluster count :math:`K_j` (Efron & Tibshirani 1993,
    14.3, as ``scipy.stats.bootstrap`` computes it for several samples):
    :math:`U = (K - 1)(\bar\theta_{(\cdot)} - \theta_{(k)})` from the
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
    check_method_for_metrics(spec.method, names, func=func)
    rows = engine_rows(names, stats)  # and the studentised interval's companions
    given = _precomputed(log_temperature, log_temperature_replicates, log_temperature_jackknife, spec)
    solver: BatchedTemperatureSolver | None = None
    if given is None:
        solver = BatchedTemperatureSolver(
            zf, yf, fit_plan.cluster_of_row, fit_plan.n_clusters, bounds=bounds, func=func
        )
        fit, s0 = solver.fit, solver.fit.log_temperature
    else:
        low, high = temperature_bounds(bounds, func=func)
        fit = fit_validated(zf, yf, tol=1e-10, max_iter=100, low=low, high=high)
        s0 = given[0]
    before_probs = softmax(ze)
    before = EvaluatorSet([make_evaluator(stat, (before_probs, ye), eval_plan) for stat in rows.statistics])
    after_at_s0 = metrics_at_temperatures(rows.statistics, ze, ye, np.array([s0]), np.ones((1, eval_plan.n)))[
        :, 0
    ]
    estimates = np.stack([before.estimates(eval_plan.n_clusters), after_at_s0], axis=1)

    b = spec.n_resamples
    chunk = spec.chunk_size or min(
        max(1, min(b, CHUNK_ELEMENTS // max(fit_plan.n_clusters, eval_plan.n_clusters))),
        auto_chunk_size(before.sized, eval_plan, b),
    )
    s_rep = np.empty(b)
    replicates = np.empty((len(rows.statistics), 2, b))
    n_exact = n_bound = 0
    max_err = 0.0
    start = 0
    streams = zip(
        _chunks(fit_plan, fit_stream_seed(spec.seed), spec, chunk),
        _chunks(eval_plan, spec.seed, spec, chunk),
        strict=True,
    )
    for fit_draws, eval_draws in streams:  # a loop over chunks of resamples
        stop = start + eval_draws.size
        if given is not None:
            s_rep[start:stop] = given[1][start:stop]
        elif solver is not None:
            sol = solver.solve(fit_draws.weights)
            s_rep[start:stop] = sol.log_temperature
            n_exact += int(sol.exact.sum())
            n_bound += int(np.count_nonzero(sol.bound))
            max_err = max(max_err, float(sol.error_bound.max()))
        replicates[:, 0, start:stop] = before.replicates(eval_draws)
        replicates[:, 1, start:stop] = metrics_at_temperatures(
            rows.statistics,
            ze,
            ye,
            s_rep[start:stop],
            eval_draws.weights,
            workers=spec.n_workers,
            row_cluster=eval_plan.cluster_of_row,
        )
        start = stop

    s_jack = jackknife = None
    if spec.method == "bca":
        if given is not None:
            s_jack = given[2]
        elif solver is not None:
            s_jack = solver.jackknife().log_temperature if solver.n_clusters > 1 else None
        s_jack, jackknife = _bca_influence(s0, s_jack, stats, ze, ye, eval_plan, before_probs, s_rep)
    estimates, replicates = rows.on_metric_scale(estimates, replicates)
    table = ReplicateTable.from_plan(
        names,
        PROB_SETS,
        estimates,
        replicates,
        spec=spec,
        plan=eval_plan,
        owner="RefitIntervals",
        jackknife=jackknife,
    )
    return RefitIntervals(
        table=table,
        n_bins=stats[0].n_bins,
        fit=fit,
        fit_plan=fit_plan,
        eval_plan=eval_plan,
        log_temperature_replicates=_readonly(s_rep),
        log_temperature_jackknife=s_jack,
        n_exact=n_exact,
        n_at_bound=n_bound,
        max_error_bound=max_err,
        log_temperature_estimate=None if given is None else s0,
    )


def _precomputed(
    estimate: float | None, replicates: ArrayLike | None, jackknife: ArrayLike | None, spec: BootstrapSpec
) -> tuple[float, NDArray[np.float64], NDArray[np.float64] | None] | None:
    """Validate precomputed log temperatures: None, or (estimate, (B,) replicates, jackknife or None)."""
    func = "refit_bootstrap"
    if estimate is None and replicates is None and jackknife is None:
        return None
    if estimate is None or replicates is None:
        raise DataError(
            f"The 'log_temperature' and 'log_temperature_replicates' parameters of {func} go together: pass "
            "both (precomputed temperatures) or neither (fit T in every resample)."
        )
    s0 = float(estimate)
    rep = np.asarray(replicates, dtype=np.float64)
    if rep.shape != (spec.n_resamples,) or not (math.isfinite(s0) and np.isfinite(rep).all()):
        raise DataError(
            f"The 'log_temperature_replicates' parameter of {func} must hold spec.n_resamples = "
            f"{spec.n_resamples} finite values, shape ({spec.n_resamples},), with a finite "
            f"'log_temperature'. Got shape {rep.shape}."
        )
    jk = None
    if jackknife is not None:
        jk = np.array(jackknife, dtype=np.float64).reshape(-1)
        if not np.isfinite(jk).all():
            raise DataError(f"The 'log_temperature_jackknife' parameter of {func} must be finite.")
    elif spec.method == "bca":
        raise DataError(
            f"The 'log_temperature_jackknife' parameter of {func} is required with precomputed temperatures "
            "and spec.method='bca' (the acceleration needs the fit part's influence); pass the "
            "leave-one-cluster-out values, or use method='percentile'."
        )
    return s0, rep, jk


def _bca_influence(
    s0: float,
    k_fit: NDArray[np.float64] | None,
    stats: Sequence[RefitStatistic],
    ze: NDArray[np.float64],
    ye: NDArray[np.int64],
    eval_plan: ClusterPlan,
    before_probs: NDArray[np.float64],
    s_rep: NDArray[np.float64],
) -> tuple[NDArray[np.float64] | None, NDArray[np.float64] | None]:
    """Jackknife log T and the two-sample scaled influence values of each metric (see refit_bootstrap)."""
    if k_fit is None or eval_plan.n_clusters < 2:
        return None if k_fit is None else _readonly(k_fit), None
    s_jack = _readonly(k_fit)
    after_probs = softmax(ze, temperature=math.exp(s0))
    m = len(stats)
    eval_part = np.empty((m, 2, eval_plan.n_clusters))
    k_eval, k_fit_clusters = eval_plan.n_clusters, s_jack.shape[0]
    for i, stat in enumerate(stats):  # a loop over metrics
        for j, probs in enumerate((before_probs, after_probs)):
            evaluator = make_evaluator(stat, (probs, ye), eval_plan)
            jk = evaluator.jackknife(auto_chunk_size([evaluator], eval_plan, eval_plan.n_clusters))
            # each sample's influence values carry its own 1/n (Efron & Tibshirani 1993, 14.3; scipy)
            eval_part[i, j] = (k_eval - 1) * (jk - jk.mean()) / k_eval
    h = max(float(np.std(s_rep, ddof=1)), 1e-6)
    ends = metrics_at_temperatures(stats, ze, ye, np.array([s0 - h, s0 + h]), np.ones((2, eval_plan.n)))
    slope = (ends[:, 1] - ends[:, 0]) / (2.0 * h)  # (M,)
    ds = (k_fit_clusters - 1) * (s_jack - s_jack.mean()) / k_fit_clusters
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
    return RefitIntervals(
        table=ReplicateTable.from_plan(
            (), PROB_SETS, np.zeros((0, 2)), np.zeros((0, 2, b)), spec=spec, plan=plan, owner="RefitIntervals"
        ),
        n_bins=0,
        fit=solver.fit,
        fit_plan=plan,
        eval_plan=plan,
        log_temperature_replicates=_readonly(s_rep),
        log_temperature_jackknife=s_jack,
        n_exact=n_exact,
        n_at_bound=n_bound,
        max_error_bound=max_err,
    )
