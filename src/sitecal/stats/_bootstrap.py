"""``bootstrap_interval``: a seeded, vectorised cluster/stratified bootstrap for one statistic."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sitecal.errors import DataError
from sitecal.stats._engine_steps import resampled_values
from sitecal.stats._evaluators import (
    EvaluatorSet,
    PreparedStatistic,
    SufficientStatistic,
    auto_chunk_size,
    make_evaluator,
)
from sitecal.stats._intervals import interval_result
from sitecal.stats._resample import ClusterPlan, make_plan
from sitecal.stats._scale import check_method_for_metrics, engine_rows, resampled
from sitecal.stats._spec import BootstrapResult, BootstrapSpec, Method, validated_options

__all__ = ["Statistic", "as_data", "bootstrap_interval"]

Statistic = Callable[..., Any] | SufficientStatistic | PreparedStatistic


def as_data(data: Any, *, func: str) -> tuple[NDArray[Any], ...]:
    """Normalise ``data`` (an array, or a tuple of arrays paired row by row)."""
    arrays = tuple(np.asarray(a) for a in data) if isinstance(data, tuple) else (np.asarray(data),)
    if not arrays or any(a.ndim == 0 for a in arrays):
        raise DataError(
            f"The 'data' parameter of {func} must be an array or a tuple of arrays with one row per "
            "sample (first axis N >= 1)."
        )
    n = arrays[0].shape[0]
    for i, a in enumerate(arrays):
        if a.shape[0] != n:
            raise DataError(
                f"The 'data' parameter of {func} must hold arrays of equal length (paired rows). "
                f"data[0] has {n} rows, data[{i}] has {a.shape[0]}."
            )
    if n < 1:
        raise DataError(f"The 'data' parameter of {func} must have at least one row. Got 0.")
    return arrays


def bootstrap_interval(
    statistic: Statistic,
    data: ArrayLike | tuple[ArrayLike, ...],
    *,
    clusters: ArrayLike | None = None,
    strata: ArrayLike | None = None,
    n_resamples: int = 1000,
    level: float = 0.95,
    method: Method = "percentile",
    seed: int = 0,
    chunk_size: int | None = None,
    workers: int | None = None,
) -> BootstrapResult:
    r"""Bootstrap confidence interval for a statistic, resampling clusters within strata.

    Parameters
    ----------
    statistic : callable or metric statistic
        One of

        - a plain callable ``statistic(*data, weights=W) -> (B,)`` where ``W`` has shape (B, N): row
          ``b`` gives each row's weight in resample ``b`` (the number of times its cluster was drawn;
          a leave-one-cluster-out jackknife passes 0/1 weights). It must equal the plain statistic
          when ``W`` is all ones, and treat the rows of ``W`` independently. Example, the mean:
          ``lambda x, weights: weights @ x / weights.sum(axis=1)``. Cost O(B N) per chunk.
        - an object with ``row_terms(*data) -> (N, J)`` and ``from_sums((B, J)) -> (B,)`` (a statistic of
          weighted sums, :class:`SufficientStatistic`): the fast path, O(B * n_clusters * J).
        - an object with ``prepare(*data)`` and ``evaluate(prepared, W)`` (:class:`PreparedStatistic`).

        :func:`sitecal.metrics.metric_statistic` builds the metrics ready-made (``data=(probs, labels)``).
    data : array_like or tuple of array_like
        One array, or a tuple of arrays paired row by row (same first axis N).
    clusters : array_like, shape (N,), optional
        Cluster id per row (pseudonymised patient key): clusters are resampled whole, since studies
        of one patient are not independent. Default: each row is its own cluster.
    strata : array_like, shape (N,), optional
        Stratum per row (e.g. site); each stratum's clusters are resampled separately, so every
        resample keeps each stratum's cluster count. A cluster must lie in one stratum.
    n_resamples : int, default 1000
    level : float, default 0.95
        Two-sided confidence level.
    method : {"percentile", "bca"}, default "percentile"
        BCa uses a leave-one-cluster-out jackknife for the acceleration.
    seed : int, default 0
        Seed of ``numpy.random.default_rng``; recorded in the result.
    chunk_size : int, optional
        Resamples per batch (memory only). Results are bit-for-bit identical for every value with the
        built-in statistics, and with callables that treat rows of ``W`` independently.
    workers : int, optional
        Threads evaluating chunks in parallel (default: every available core). Speed only: results are
        identical for every value. A plain callable must then be safe to call from several threads
        (numpy code is); pass ``workers=1`` otherwise.

    Returns
    -------
    BootstrapResult

    Notes
    -----
    Percentile: the ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles (linear interpolation) of the
    replicates. BCa: quantiles at :math:`\Phi(z_0 + (z_0 + z_\alpha) / (1 - a (z_0 + z_\alpha)))` with
    :math:`z_0 = \Phi^{-1}` of the mid-rank share of replicates below the estimate and
    :math:`a = \sum_k (\bar\theta - \theta_{(k)})^3 / (6 [\sum_k (\bar\theta - \theta_{(k)})^2]^{3/2})`
    over leave-one-cluster-out values, as in ``scipy.stats.bootstrap`` with each row its own cluster.
    Degenerate cases (all replicates equal, e.g. a single cluster; non-finite replicates; BCa
    undefined) return an interval described in ``note`` (zero width, or NaN ends), never an exception.

    References
    ----------
    B. Efron. "Better Bootstrap Confidence Intervals." JASA 82(397), 1987. B. Efron, R. Tibshirani.
    An Introduction to the Bootstrap, 1993 (ch. 14). A. C. Davison, D. V. Hinkley. Bootstrap Methods
    and their Application, 1997 (section 3.8, cluster resampling).

    Examples
    --------
    >>> x = np.arange(10.0)
    >>> mean = lambda x, weights: weights @ x / weights.sum(axis=1)
    >>> res = bootstrap_interval(mean, x, n_resamples=2000, seed=1)
    >>> res.estimate, bool(res.low < 4.5 < res.high), res.n_clusters
    (4.5, True, 10)
    """
    func = "bootstrap_interval"
    b, lvl, how, s, chunk = validated_options(
        n_resamples=n_resamples, level=level, method=method, seed=seed, chunk_size=chunk_size, func=func
    )
    arrays = as_data(data, func=func)
    plan = make_plan(arrays[0].shape[0], clusters, strata, func=func)
    name = getattr(statistic, "name", "")  # a registry metric's statistic; any other callable has none
    check_method_for_metrics(how, [name], func=func)
    spec = BootstrapSpec(n_resamples=b, level=lvl, method=how, seed=s)
    return _interval(name, statistic, arrays, plan, spec, chunk_size=chunk, workers=workers)


def _interval(
    name: str,
    statistic: Statistic,
    arrays: tuple[NDArray[Any], ...],
    plan: ClusterPlan,
    spec: BootstrapSpec,
    *,
    chunk_size: int | None,
    workers: int | None,
) -> BootstrapResult:
    """The interval of ``spec`` of a checked statistic (a registry metric's ``name``, or "") on ``plan``."""
    rows = engine_rows([name], [resampled(statistic)])  # and the studentised interval's companions
    evaluators = EvaluatorSet([make_evaluator(stat, arrays, plan) for stat in rows.statistics])
    chunk = chunk_size or auto_chunk_size(evaluators.sized, plan, spec.n_resamples)
    estimates = evaluators.estimates(plan.n_clusters)
    threads = BootstrapSpec(workers=workers).n_workers
    replicates = resampled_values(
        evaluators, plan, seed=spec.seed, n_resamples=spec.n_resamples, chunk_size=chunk, workers=threads
    )
    # as computed, but the debiased ECE
    estimates, replicates = rows.on_metric_scale(estimates, replicates)
    bca = spec.method == "bca" and plan.n_clusters > 1
    jackknife = evaluators.evaluators[0].jackknife(chunk) if bca else None
    return interval_result(
        float(estimates[0]),
        replicates[0],
        jackknife,
        spec=spec,
        n=plan.n,
        n_clusters=plan.n_clusters,
        n_strata=plan.n_strata,
    )
