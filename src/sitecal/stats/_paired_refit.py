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

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sitecal.calibration import FittedMethod, fit_method
from sitecal.errors import DataError
from sitecal.metrics import SmoothECEStatistic, SumMetricStatistic, metric_statistic, softmax
from sitecal.stats._refit_result import _readonly, fit_stream_seed
from sitecal.stats._resample import CHUNK_ELEMENTS, ClusterPlan, cluster_ids, draw_chunks, make_plan
from sitecal.stats._scale import engine_rows, resampled
from sitecal.stats._spec import BootstrapSpec

__all__ = ["Arms", "crossfit_folds", "fit_notes", "paired_arms", "statistics"]

Statistic = SumMetricStatistic | SmoothECEStatistic


def statistics(func: str, metrics: Sequence[str], n_bins: int) -> list[Statistic]:
    """The metrics' statistics; a metric that recomputes its bins per resample is refused."""
    if isinstance(metrics, str) or not metrics or len(set(metrics)) != len(metrics):
        raise DataError(
            f"The 'metrics' parameter of {func} must list metric names, each once. Got {metrics!r}."
        )
    stats: list[Statistic] = []
    for name in metrics:
        stat = resampled(metric_statistic(name, n_bins=n_bins))
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
    folds: tuple[ArrayLike, ArrayLike, int] | None = None,
) -> Arms:
    """Fit each arm on the fit split and measure it on the evaluation split, whole and resampled (paired).

    ``fit_split`` and ``eval_split`` are ``(logits, labels, clusters)``; ``spec.method`` must be
    ``"percentile"`` (the caller's interval; BCa would need every arm refitted without each patient).

    ``folds``: ``(fit_folds, eval_folds, K)`` for cross-fitting, where the evaluated rows are the fit rows'
    patients in other folds: each evaluated row of fold ``k`` is calibrated by the arm fitted on the fit
    rows of the other folds, and each resample draws the patients once for both sets (as
    :func:`~sitecal.stats.crossfit_bootstrap`); ``fits`` are then the arms fitted on every fit row (what
    is deployed). Without ``folds`` the two splits are independent samples, resampled independently.
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
    design = _design(func, zf.shape[0], ze.shape[0], fit_split[2], eval_split[2], folds)

    def arm_probabilities(arm: str | None, weights: NDArray[np.float64] | None, r: int) -> list[Any]:
        """The arm's evaluated probabilities (r, N_e, C), and its fits (for their convergence)."""
        if arm is None:
            return [np.broadcast_to(softmax(ze), (r, *ze.shape))]
        out = np.empty((r, *ze.shape))
        made: list[Any] = [out]
        for rows, evaluated in design.parts:  # one part for one split, a part per fold under cross-fitting
            w = None if weights is None else weights[:, rows]
            fit = fit_method(arm, zf[rows], yf[rows], w, **options.get(arm, {}))
            out[:, evaluated] = fit.probabilities(ze[evaluated])
            made.append(fit)
        return made

    ones = np.ones((1, ze.shape[0]))
    rows = engine_rows([s.name for s in stats], stats)  # and the studentised interval's companions
    measured = rows.statistics
    estimates = np.stack([measure(measured, arm_probabilities(a, None, 1)[0], ye, ones)[:, 0] for a in arms])

    b = spec.n_resamples
    chunk = spec.chunk_size or max(1, min(b, CHUNK_ELEMENTS // max(ze.shape[0] * ze.shape[1], 1)))
    replicates = np.empty((len(arms), len(measured), b))
    not_converged = [0] * len(arms)
    start = 0
    for fit_weights, eval_weights in design.draws(spec.seed, b, chunk):  # a loop over chunks of resamples
        stop = start + eval_weights.shape[0]
        for i, arm in enumerate(arms):  # a loop over arms
            probs, *refits = arm_probabilities(arm, fit_weights, eval_weights.shape[0])
            for refit in refits:  # a loop over the arm's fits (one, or one per fold)
                not_converged[i] += int(np.count_nonzero(~np.asarray(refit.converged)))
            replicates[i, :, start:stop] = measure(measured, probs, ye, eval_weights)
        start = stop
    estimates, replicates = rows.on_metric_scale(estimates, replicates, axis=1)
    return Arms(
        fit_plan=design.fit_plan,
        eval_plan=design.eval_plan,
        estimates=_readonly(estimates),
        replicates=_readonly(replicates),
        fits=fits,
        not_converged=tuple(not_converged),
    )


@dataclass(frozen=True, eq=False)
class _Design:
    """How the rows are fitted and resampled: one split (two samples) or cross-fitted folds (one sample).

    ``parts``: (fit rows, evaluated rows) pairs, boolean masks; ``draws`` yields (fit row weights,
    evaluation row weights) per chunk of resamples.
    """

    fit_plan: ClusterPlan
    eval_plan: ClusterPlan
    parts: tuple[tuple[NDArray[np.bool_], NDArray[np.bool_]], ...]
    joint: ClusterPlan | None  # cross-fitting: one plan over both sets' patients

    def draws(
        self, seed: int, n_resamples: int, chunk: int
    ) -> Iterator[tuple[NDArray[np.float64], NDArray[np.float64]]]:
        if self.joint is not None:
            n_fit = self.fit_plan.n
            codes = self.joint.cluster_of_row
            for d in draw_chunks(self.joint, seed=seed, n_resamples=n_resamples, chunk_size=chunk):
                yield d.weights[:, codes[:n_fit]], d.weights[:, codes[n_fit:]]
            return
        streams = zip(
            draw_chunks(self.fit_plan, seed=fit_stream_seed(seed), n_resamples=n_resamples, chunk_size=chunk),
            draw_chunks(self.eval_plan, seed=seed, n_resamples=n_resamples, chunk_size=chunk),
            strict=True,
        )
        for f, e in streams:
            yield f.weights[:, self.fit_plan.cluster_of_row], e.weights[:, self.eval_plan.cluster_of_row]


def _design(
    func: str,
    n_fit: int,
    n_eval: int,
    fit_clusters: ArrayLike | None,
    eval_clusters: ArrayLike | None,
    folds: tuple[ArrayLike, ArrayLike, int] | None,
) -> _Design:
    fit_plan = make_plan(n_fit, fit_clusters, None, func=f"{func} (fit split)")
    eval_plan = make_plan(n_eval, eval_clusters, None, func=f"{func} (eval split)")
    everything = (np.ones(n_fit, dtype=bool), np.ones(n_eval, dtype=bool))
    if folds is None:
        return _Design(fit_plan, eval_plan, (everything,), None)
    if fit_clusters is None or eval_clusters is None:
        raise DataError(
            f"{func}: cross-fitting needs each row's patient in both sets (fit_clusters, eval_clusters)."
        )
    k = int(folds[2])
    fit_folds, eval_folds = (np.asarray(f) for f in folds[:2])
    if fit_folds.shape != (n_fit,) or eval_folds.shape != (n_eval,) or k < 2:
        raise DataError(f"{func}: the folds must give each fit and each evaluated row its fold, and K >= 2.")
    parts = []
    for fold in range(k):  # a loop over folds
        rows, evaluated = fit_folds != fold, eval_folds == fold
        if evaluated.any() and not rows.any():
            raise DataError(f"{func}: fold {fold} has no fit rows in the other folds; use fewer folds.")
        if evaluated.any():
            parts.append((rows, evaluated))
    patients = np.concatenate(cluster_ids(fit_clusters, eval_clusters))
    # evaluated patients and fit-only ones drawn apart, as crossfit_bootstrap draws them (a small group's
    # rows would be missing from some resamples)
    held_patients = np.isin(patients, patients[n_fit:])
    joint = make_plan(patients.shape[0], patients, None if held_patients.all() else held_patients, func=func)
    return _Design(fit_plan, eval_plan, tuple(parts), joint)


def crossfit_folds(
    func: str, fit_folds: ArrayLike | None, eval_folds: ArrayLike | None, folds: int | None
) -> tuple[ArrayLike, ArrayLike, int] | None:
    """``paired_arms``'s ``folds`` from a caller's three cross-fitting parameters (all or none)."""
    given = [x is not None for x in (fit_folds, eval_folds, folds)]
    if not any(given):
        return None
    if not all(given):
        raise DataError(
            f"The 'fit_folds', 'eval_folds' and 'folds' parameters of {func} go together: give all three "
            "(cross-fitting) or none (one split)."
        )
    assert fit_folds is not None and eval_folds is not None and folds is not None
    return fit_folds, eval_folds, int(folds)
