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

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sitecal._validation import check_int, check_labels, check_logits
from sitecal.calibration import (
    DEFAULT_BOUNDS,
    BatchedTemperatureSolver,
)
from sitecal.errors import DataError
from sitecal.metrics import SmoothECEStatistic, SumMetricStatistic, metric_statistic, softmax
from sitecal.metrics.registry import ECE
from sitecal.stats._engine_steps import BeforeAfter, checked_spec, checked_split, metric_names
from sitecal.stats._evaluators import auto_chunk_size, make_evaluator
from sitecal.stats._fit_temperature import FitTemperature, Given, precomputed, solve_resamples
from sitecal.stats._metric_intervals import DEFAULT_METRICS
from sitecal.stats._refit_result import PROB_SETS, RefitIntervals, _readonly, fit_stream_seed
from sitecal.stats._replicate_table import ReplicateTable
from sitecal.stats._resample import CHUNK_ELEMENTS, ClusterPlan, Draws, draw_chunks, make_plan
from sitecal.stats._scale import check_method_for_metrics, engine_rows, resampled
from sitecal.stats._spec import BootstrapSpec
from sitecal.stats._term_sums import RefitStatistic, metrics_at_temperatures

__all__ = ["RefitIntervals", "bootstrap_temperature", "fit_stream_seed", "refit_bootstrap"]

_FUNC = "refit_bootstrap"


@dataclass(frozen=True, eq=False)
class _Split:
    """One split's checked logits (N, C) and labels (N,), and the plan of its resamples."""

    logits: NDArray[np.float64]
    labels: NDArray[np.int64]
    plan: ClusterPlan


def _split(
    logits: ArrayLike,
    labels: ArrayLike,
    clusters: ArrayLike | None,
    strata: ArrayLike | None,
    which: str,
    *,
    like: _Split | None = None,
) -> _Split:
    """The split ``which`` ("fit" or "eval"), checked; with ``like``, as many classes as that split."""
    z, y = checked_split(logits, labels, which=which, func=_FUNC)
    plan = make_plan(z.shape[0], clusters, strata, func=f"{_FUNC} ({which} split)")
    if like is not None and z.shape[1] != like.logits.shape[1]:
        raise DataError(
            f"The '{which}_logits' parameter of {_FUNC} must have as many classes as 'fit_logits' "
            f"({like.logits.shape[1]}). Got {z.shape[1]}."
        )
    return _Split(z, y, plan)


def _statistics(
    metrics: Sequence[str], n_bins: int, *, method: str
) -> tuple[tuple[str, ...], list[RefitStatistic]]:
    """The metrics' names and statistics, each one the refit can evaluate under moving temperatures.

    ``method``: the interval's; BCa is refused for a metric it is not valid for.
    """
    names = metric_names(metrics, func=_FUNC)
    bins = check_int(n_bins, name="n_bins", func=_FUNC, minimum=1)
    stats: list[RefitStatistic] = []
    for m in names:
        stat = resampled(metric_statistic(m, n_bins=bins))
        if not isinstance(stat, SumMetricStatistic | SmoothECEStatistic):
            raise DataError(
                f"The 'metrics' parameter of {_FUNC} must name metrics it can evaluate under each resample's "
                f"temperature; {m!r} recomputes its bins per resample and is not supported here. Use "
                f"{ECE.name!r} (equal-width) instead."
            )
        stats.append(stat)
    check_method_for_metrics(method, names, func=_FUNC)
    return names, stats


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
    spec = checked_spec(spec, func=_FUNC)
    fit_split = _split(fit_logits, fit_labels, fit_clusters, fit_strata, "fit")
    eval_split = _split(eval_logits, eval_labels, eval_clusters, eval_strata, "eval", like=fit_split)
    names, stats = _statistics(metrics, n_bins, method=spec.method)
    given = precomputed(log_temperature, log_temperature_replicates, log_temperature_jackknife, spec)
    return _bootstrap(fit_split, eval_split, names, stats, bounds, spec, given)


def _bootstrap(
    fit_split: _Split,
    eval_split: _Split,
    names: tuple[str, ...],
    stats: Sequence[RefitStatistic],
    bounds: tuple[float, float],
    spec: BootstrapSpec,
    given: Given | None,
) -> RefitIntervals:
    """The refit bootstrap of checked splits and metrics (see :func:`refit_bootstrap`)."""
    rows = engine_rows(names, stats)  # and the studentised interval's companions
    temperature = FitTemperature.of(fit_split.logits, fit_split.labels, fit_split.plan, bounds, given)
    pairs = BeforeAfter.of(rows.statistics, eval_split.logits, eval_split.labels, eval_split.plan)
    estimates = pairs.estimates(np.array([temperature.estimate]))
    chunk = pairs.chunk_size(spec, max(fit_split.plan.n_clusters, eval_split.plan.n_clusters))
    solved = temperature.replicates(spec, chunk)
    eval_draws = draw_chunks(eval_split.plan, seed=spec.seed, n_resamples=spec.n_resamples, chunk_size=chunk)
    replicates = pairs.replicates(
        _with_slices(eval_draws, solved.log_temperature), spec.n_resamples, spec.n_workers
    )
    s_jack = jackknife = None
    if spec.method == "bca":
        s_jack, jackknife = _bca_influence(
            temperature.estimate, temperature.jackknife(), stats, pairs, solved.log_temperature
        )
    estimates, replicates = rows.on_metric_scale(estimates, replicates)
    table = ReplicateTable.from_plan(
        names,
        PROB_SETS,
        estimates,
        replicates,
        spec=spec,
        plan=eval_split.plan,
        owner="RefitIntervals",
        jackknife=jackknife,
    )
    return RefitIntervals(
        table=table,
        n_bins=stats[0].n_bins,
        fit=temperature.fit,
        fit_plan=fit_split.plan,
        eval_plan=eval_split.plan,
        log_temperature_replicates=_readonly(solved.log_temperature),
        log_temperature_jackknife=s_jack,
        n_exact=solved.n_exact,
        n_at_bound=solved.n_at_bound,
        max_error_bound=solved.max_error_bound,
        log_temperature_estimate=None if given is None else temperature.estimate,
    )


def _with_slices(
    chunks: Iterator[Draws], values: NDArray[np.float64]
) -> Iterator[tuple[Draws, NDArray[np.float64]]]:
    """Each chunk of draws with its resamples' entries of ``values`` (the resamples in order)."""
    start = 0
    for draws in chunks:  # a loop over chunks of resamples
        yield draws, values[start : start + draws.size]
        start += draws.size


def _bca_influence(
    s0: float,
    k_fit: NDArray[np.float64] | None,
    stats: Sequence[RefitStatistic],
    pairs: BeforeAfter,
    s_rep: NDArray[np.float64],
) -> tuple[NDArray[np.float64] | None, NDArray[np.float64] | None]:
    """Jackknife log T and the two-sample scaled influence values of each metric (see refit_bootstrap).

    ``pairs``: the evaluation split's rows, plan and probabilities before calibration.
    """
    ze, ye, eval_plan, before_probs = pairs.logits, pairs.labels, pairs.plan, pairs.probs
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
    spec = checked_spec(spec, func=func)
    z = check_logits(logits, func=func)
    y = check_labels(labels, n=z.shape[0], n_classes=z.shape[1], func=func)
    plan = make_plan(z.shape[0], clusters, strata, func=func)
    solver = BatchedTemperatureSolver(z, y, plan.cluster_of_row, plan.n_clusters, bounds=bounds, func=func)
    b = spec.n_resamples
    chunk = spec.chunk_size or max(1, min(b, CHUNK_ELEMENTS // plan.n_clusters))
    solved = solve_resamples(solver, plan, spec, chunk)
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
        log_temperature_replicates=_readonly(solved.log_temperature),
        log_temperature_jackknife=s_jack,
        n_exact=solved.n_exact,
        n_at_bound=solved.n_at_bound,
        max_error_bound=solved.max_error_bound,
    )
