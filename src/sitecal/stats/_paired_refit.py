"""The refit bootstrap of recalibration methods: arms fitted and measured on the same resamples.

An *arm* is a method of :data:`sitecal.calibration.METHODS`, or ``None`` for the uncalibrated
probabilities. Resample ``b`` draws fit-split patients from ``default_rng(fit_stream_seed(seed))`` and
evaluation-split patients from ``default_rng(seed)`` (the streams of
:func:`~sitecal.stats.refit_bootstrap`), refits every method arm on the drawn fit rows and measures every
arm on the drawn evaluation rows, so any two arms' replicates are paired. Used by
:func:`~sitecal.stats.compare_methods` and :func:`~sitecal.stats.refit_method_bootstrap`.

The replicates are the same bytes for any thread count and chunk size: the fits solve each resample's
problem on its own, and the measures reduce each resample on its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sitecal.calibration import FittedMethod, fit_method
from sitecal.errors import DataError
from sitecal.metrics import SmoothECEStatistic, SumMetricStatistic, metric_statistic, softmax
from sitecal.stats._refit_result import _readonly, fit_stream_seed
from sitecal.stats._resample import CHUNK_ELEMENTS, ClusterPlan, draw_chunks, make_plan
from sitecal.stats._spec import BootstrapSpec

__all__ = ["Arms", "fit_notes", "paired_arms", "statistics"]

Statistic = SumMetricStatistic | SmoothECEStatistic


def statistics(func: str, metrics: Sequence[str], n_bins: int) -> list[Statistic]:
    """The metrics' statistics; a metric that recomputes its bins per resample is refused."""
    if isinstance(metrics, str) or not metrics or len(set(metrics)) != len(metrics):
        raise DataError(
            f"The 'metrics' parameter of {func} must list metric names, each once. Got {metrics!r}."
        )
    stats: list[Statistic] = []
    for name in metrics:
        stat = metric_statistic(name, n_bins=n_bins)
        if not isinstance(stat, SumMetricStatistic | SmoothECEStatistic):
            raise DataError(
                f"{func} cannot measure {name!r} under each resample's refitted probabilities (it recomputes "
                "its bins per resample); use the equal-width ECE or a metric without bins."
            )
        stats.append(stat)
    return stats


def measure(
    stats: Sequence[Statistic],
    probs: NDArray[np.float64],
    labels: NDArray[np.int64],
    row_weights: NDArray[np.float64],
) -> NDArray[np.float64]:
    """Each statistic of each resample's probabilities (R, N, C) under its row weights (R, N): (M, R)."""
    r, n, c = probs.shape
    out = np.empty((len(stats), r))
    flat = probs.reshape(r * n, c)
    tiled = np.tile(labels, r)
    for i, stat in enumerate(stats):  # a loop over metrics
        if isinstance(stat, SmoothECEStatistic):
            out[i] = stat.evaluate_each(probs, labels, row_weights)
            continue
        terms = stat.row_terms(flat, tiled).reshape(r, n, -1)
        out[i] = stat.from_sums(np.einsum("rn,rnj->rj", row_weights, terms))
    return out


def fit_notes(fit: FittedMethod, not_converged: int, n_resamples: int) -> tuple[str, ...]:
    """The whole split's fit notes, and how many resampled fits stopped before converging."""
    if not not_converged:
        return fit.notes
    return (*fit.notes, f"{not_converged} of {n_resamples} resampled fits stopped before converging.")


@dataclass(frozen=True, eq=False)
class Arms:
    """What :func:`paired_arms` measured.

    Attributes
    ----------
    fit_plan, eval_plan : ClusterPlan
    estimates : numpy.ndarray, shape (arms, metrics)
        Each arm fitted on the whole fit split, measured on the whole evaluation split.
    replicates : numpy.ndarray, shape (arms, metrics, B)
    fits : tuple of FittedMethod or None
        Each arm's fit on the whole fit split (None for the uncalibrated arm).
    not_converged : tuple of int
        Per arm, resampled fits that stopped before converging.
    """

    fit_plan: ClusterPlan
    eval_plan: ClusterPlan
    estimates: NDArray[np.float64]
    replicates: NDArray[np.float64]
    fits: tuple[FittedMethod | None, ...]
    not_converged: tuple[int, ...]


def _probabilities(fit: FittedMethod | None, logits: NDArray[np.float64], r: int) -> NDArray[np.float64]:
    if fit is None:
        return np.broadcast_to(softmax(logits), (r, *logits.shape))
    return fit.probabilities(logits)


def paired_arms(
    func: str,
    fit_split: tuple[ArrayLike, ArrayLike, ArrayLike | None],
    eval_split: tuple[ArrayLike, ArrayLike, ArrayLike | None],
    arms: Sequence[str | None],
    stats: Sequence[Statistic],
    spec: BootstrapSpec,
    options: Mapping[str, Mapping[str, Any]],
) -> Arms:
    """Fit each arm on the fit split and measure it on the evaluation split, whole and resampled (paired).

    ``fit_split`` and ``eval_split`` are ``(logits, labels, clusters)``; ``spec.method`` must be
    ``"percentile"`` (the caller's interval; BCa would need every arm refitted without each patient).
    """
    if not isinstance(spec, BootstrapSpec):
        raise DataError(f"The 'spec' parameter of {func} must be a BootstrapSpec. Got {type(spec).__name__}.")
    if spec.method != "percentile":
        raise DataError(
            f"The 'spec' parameter of {func} must use method='percentile'; BCa's acceleration would need "
            "every method refitted without each patient in turn."
        )
    zf, yf = np.asarray(fit_split[0], dtype=np.float64), np.asarray(fit_split[1])
    ze, ye = np.asarray(eval_split[0], dtype=np.float64), np.asarray(eval_split[1])
    fits = tuple(None if a is None else fit_method(a, zf, yf, **options.get(a, {})) for a in arms)
    if ze.ndim != 2 or zf.ndim != 2 or ze.shape[1] != zf.shape[1] or ye.shape != (ze.shape[0],):
        raise DataError(
            f"The evaluation logits and labels of {func} must have shapes (N, {zf.shape[-1]}) and (N,). Got "
            f"{ze.shape} and {ye.shape}."
        )
    ye = ye.astype(np.int64)
    fit_plan = make_plan(zf.shape[0], fit_split[2], None, func=f"{func} (fit split)")
    eval_plan = make_plan(ze.shape[0], eval_split[2], None, func=f"{func} (eval split)")
    ones = np.ones((1, ze.shape[0]))
    estimates = np.stack([measure(stats, _probabilities(f, ze, 1), ye, ones)[:, 0] for f in fits])

    b = spec.n_resamples
    chunk = spec.chunk_size or max(1, min(b, CHUNK_ELEMENTS // max(ze.shape[0] * ze.shape[1], 1)))
    replicates = np.empty((len(arms), len(stats), b))
    not_converged = [0] * len(arms)
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
        for i, arm in enumerate(arms):  # a loop over arms
            refit = None if arm is None else fit_method(arm, zf, yf, fit_weights, **options.get(arm, {}))
            if refit is not None:
                not_converged[i] += int(np.count_nonzero(~np.asarray(refit.converged)))
            probs = _probabilities(refit, ze, eval_draws.size)
            replicates[i, :, start:stop] = measure(stats, probs, ye, eval_weights)
        start = stop
    return Arms(
        fit_plan=fit_plan,
        eval_plan=eval_plan,
        estimates=_readonly(estimates),
        replicates=_readonly(replicates),
        fits=fits,
        not_converged=tuple(not_converged),
    )
