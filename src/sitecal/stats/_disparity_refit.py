"""Disparities after calibration whose intervals include the temperatures' uncertainty.

With ``bootstrap.refit`` the after-calibration gaps between groups are bootstrapped over the whole
fit-then-evaluate procedure: in every resample each temperature is refitted on the drawn patients of the
rows it was fitted on (:class:`TemperatureReplicates`), each evaluated row is calibrated with its own
refitted temperature, and every group's metric, its complement's and the gaps come from that resample.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sitecal import calibration
from sitecal._validation import check_labels, check_logits, check_probs
from sitecal.calibration import DEFAULT_BOUNDS, BatchedTemperatureSolver
from sitecal.errors import DataError
from sitecal.metrics import softmax
from sitecal.stats._disparity import DisparityResult, FixedComparison, Grouped, assemble, group_jackknife
from sitecal.stats._refit_result import fit_stream_seed
from sitecal.stats._refit_terms import RefitTerms, checked_metrics
from sitecal.stats._resample import CHUNK_ELEMENTS, ClusterPlan, Draws, cluster_ids, draw_chunks, make_plan
from sitecal.stats._solver_set import SolverSet
from sitecal.stats._spec import BootstrapSpec

__all__ = ["TemperatureFit", "TemperatureReplicates", "refit_disparity_intervals", "refit_disparity_stages"]


@dataclass(frozen=True)
class TemperatureFit:
    """One temperature: the fit rows it is fitted on, and the evaluated rows it calibrates (boolean masks).

    ``fit``: its full-data fit where already known (:class:`~sitecal.calibration.BatchedTemperatureSolver`).
    ``family``: a name shared by temperatures fitted on whole patients of the same rows (cross-fitting:
    one group's temperature in each fold, each fitted on the other folds' patients); their refits share
    one surrogate (:func:`~sitecal.calibration.family_surrogates`). None: a surrogate of its own.
    """

    fit_rows: NDArray[np.bool_]
    eval_rows: NDArray[np.bool_]
    fit: calibration.TemperatureFit | None = None
    family: str | None = None


class TemperatureReplicates:
    """Each evaluated row's log temperature at the full data and refitted in every resample.

    Parameters
    ----------
    fit_logits, fit_labels : arrays, shapes (N_f, C) and (N_f,)
        Every row some temperature is fitted on.
    fit_patients : array of str, shape (N_f,)
    eval_patients : array of str, shape (N_e,)
        The patient of each fit row and of each evaluated row.
    fits : sequence of TemperatureFit
        The temperatures; each evaluated row is calibrated by exactly one of them.
    shared : bool
        True when fit and evaluated rows are the same patients resampled together (cross-fitting: each
        resample's one patient draw both refits every temperature and weights the evaluated rows);
        False when they are disjoint (one split: the fit patients are drawn independently, from the
        stream ``fit_stream_seed(seed)``, as :func:`~sitecal.stats.refit_bootstrap` draws them).
    spec : BootstrapSpec
    bounds : (float, float)
        Bounds of T.
    """

    def __init__(
        self,
        fit_logits: ArrayLike,
        fit_labels: ArrayLike,
        fit_patients: ArrayLike,
        eval_patients: ArrayLike,
        fits: Sequence[TemperatureFit],
        *,
        shared: bool,
        spec: BootstrapSpec,
        bounds: tuple[float, float] = DEFAULT_BOUNDS,
    ) -> None:
        func = "TemperatureReplicates"
        z = check_logits(fit_logits, func=func, name="fit_logits")
        y = check_labels(fit_labels, n=z.shape[0], n_classes=z.shape[1], func=func, name="fit_labels")
        fit_p, eval_p = cluster_ids(fit_patients, eval_patients)
        n_eval = eval_p.shape[0]
        cover = np.zeros(n_eval, dtype=np.int64)
        for fit in fits:
            cover += fit.eval_rows
        if fit_p.shape != (z.shape[0],) or np.any(cover != 1):
            raise DataError(f"{func}: every evaluated row must be calibrated by exactly one temperature.")
        self.shared, self.spec, self.eval_patients = shared, spec, eval_p
        # one patient index over both sets; the fit rows' draws index it (fit patients only, or everyone)
        self.patients = np.unique(np.concatenate([fit_p, eval_p]))
        fit_codes = np.searchsorted(self.patients, fit_p)
        self.eval_codes = np.searchsorted(self.patients, eval_p)
        self.fit_plan: ClusterPlan | None = None
        if not shared:
            if np.intersect1d(fit_p, eval_p).shape[0]:
                raise DataError(f"{func}: with shared=False the fit and evaluated patients must be disjoint.")
            self.fit_plan = make_plan(fit_p.shape[0], fit_p, None, func=func)
            self.fit_plan_patients = _patient_of_cluster(self.fit_plan, fit_codes)
        kept = [fit for fit in fits if fit.eval_rows.any()]
        self.fits = tuple(kept)  # the temperatures that calibrate some row
        shared_surrogates = _family_surrogates(z, y, fit_codes, kept, bounds=bounds, func=func)
        solvers: list[tuple[BatchedTemperatureSolver, NDArray[np.int64]]] = []
        families: dict[str, list[int]] = {}
        # each evaluated row's temperature, as an index into the solvers
        self.solver_of_row = np.empty(n_eval, dtype=np.int64)
        self.s0 = np.empty(n_eval)
        for fit, surrogate in zip(kept, shared_surrogates, strict=True):  # a loop over temperatures
            used, local = np.unique(fit_codes[fit.fit_rows], return_inverse=True)
            solver = BatchedTemperatureSolver(
                z[fit.fit_rows],
                y[fit.fit_rows],
                local,
                used.shape[0],
                bounds=bounds,
                func=func,
                fit=fit.fit,
                surrogate=surrogate,
            )
            if surrogate is not None and fit.family is not None:
                families.setdefault(fit.family, []).append(len(solvers))
            self.solver_of_row[fit.eval_rows] = len(solvers)
            solvers.append((solver, used))
            self.s0[fit.eval_rows] = solver.fit.log_temperature
        self.solvers = SolverSet(solvers, self.patients.shape[0], list(families.values()))
        self.s0_solvers = np.array([solver.fit.log_temperature for solver, _ in solvers])

    def chunks(
        self, eval_draws: Iterator[Draws], eval_plan: ClusterPlan, chunk_size: int
    ) -> Iterator[tuple[Draws, NDArray[np.float64]]]:
        """For each chunk of evaluation draws: the draws and every temperature's refit, (size, n_solvers).

        Evaluated row ``i``'s log T in resample ``b`` is ``refits[b, solver_of_row[i]]``.

        ``eval_draws`` come from ``eval_plan``, a plan of the evaluated rows whose clusters are
        ``eval_patients``, ``chunk_size`` resamples at a time; the fit draws (one split) are taken in the
        same chunks.
        """
        eval_to_all = _patient_of_cluster(eval_plan, self.eval_codes)
        fit_draws = (
            None
            if self.fit_plan is None
            else draw_chunks(
                self.fit_plan,
                seed=fit_stream_seed(self.spec.seed),
                n_resamples=self.spec.n_resamples,
                chunk_size=chunk_size,
            )
        )
        for draws in eval_draws:  # a loop over chunks of resamples
            if fit_draws is None:  # one draw of patients refits and weights alike
                refits = self.solvers.solve(draws.indices, eval_to_all)
            else:
                refits = self.solvers.solve(next(fit_draws).indices, self.fit_plan_patients)
            yield draws, refits


def _family_surrogates(
    z: NDArray[np.float64],
    y: NDArray[np.int64],
    patient_of_row: NDArray[np.int64],
    fits: Sequence[TemperatureFit],
    *,
    bounds: tuple[float, float],
    func: str,
) -> list[calibration.Surrogate | None]:
    """Each fit's shared surrogate, or None where it builds its own.

    A family shares one where it has two members or more, each with a converged full-data fit, each
    fitted on whole patients of the family's rows (every row of a patient it holds there).
    """
    out: list[calibration.Surrogate | None] = [None] * len(fits)
    named: dict[str, list[int]] = {}
    full: dict[int, calibration.TemperatureFit] = {}
    for i, fit in enumerate(fits):  # a loop over temperatures
        if fit.family is not None and fit.fit is not None and fit.fit.converged:
            named.setdefault(fit.family, []).append(i)
            full[i] = fit.fit
    for members in named.values():  # a loop over families
        rows = np.logical_or.reduce([fits[i].fit_rows for i in members])
        used, local = np.unique(patient_of_row[rows], return_inverse=True)
        held = [np.unique(local[fits[i].fit_rows[rows]]) for i in members]
        whole = all(
            np.array_equal(fits[i].fit_rows[rows], np.isin(local, clusters))
            for i, clusters in zip(members, held, strict=True)
        )
        if len(members) < 2 or not whole:
            continue
        surrogates = calibration.family_surrogates(
            z[rows],
            y[rows],
            local,
            used.shape[0],
            [(clusters, full[i]) for i, clusters in zip(members, held, strict=True)],
            bounds=bounds,
            func=func,
        )
        for i, surrogate in zip(members, surrogates, strict=True):
            out[i] = surrogate
    return out


def _patient_of_cluster(plan: ClusterPlan, patient_of_row: NDArray[np.int64]) -> NDArray[np.int64]:
    """The patient (its index) of each of the plan's clusters, which a plan numbers within its strata."""
    out = np.empty(plan.n_clusters, dtype=np.int64)
    out[plan.cluster_of_row] = patient_of_row
    return out


def refit_disparity_intervals(
    logits: ArrayLike,
    labels: ArrayLike,
    groups: ArrayLike,
    *,
    clusters: ArrayLike,
    strata: ArrayLike | None,
    temperatures: TemperatureReplicates,
    metrics: Sequence[str],
    n_bins: int = 15,
    min_group_size: int = 1,
) -> dict[str, DisparityResult]:
    """The after-calibration comparison of groups, every temperature refitted in every resample.

    :func:`refit_disparity_stages` without fixed probability sets: its parameters, and its first item
    (per metric) returned.
    """
    refitted, _ = refit_disparity_stages(
        logits,
        labels,
        groups,
        clusters=clusters,
        strata=strata,
        temperatures=temperatures,
        metrics=metrics,
        n_bins=n_bins,
        min_group_size=min_group_size,
    )
    return refitted


def refit_disparity_stages(
    logits: ArrayLike,
    labels: ArrayLike,
    groups: ArrayLike,
    *,
    clusters: ArrayLike,
    strata: ArrayLike | None,
    temperatures: TemperatureReplicates,
    metrics: Sequence[str],
    n_bins: int = 15,
    min_group_size: int = 1,
    fixed: Mapping[str, ArrayLike] | None = None,
) -> tuple[dict[str, DisparityResult], dict[str, dict[str, DisparityResult]]]:
    """The after-calibration comparison of groups, every temperature refitted in every resample.

    With ``fixed``, the comparison of each of those probability sets too, on the same draws: the
    second item, per set and metric, is what :func:`~sitecal.stats.disparity_intervals_each` gives
    for the set alone, bit for bit (the same plan and seed, so the same resamples), for one draw
    of the resamples instead of two.

    Parameters
    ----------
    logits, labels, groups, clusters, strata
        The evaluated rows: as :func:`~sitecal.stats.disparity_intervals` takes them, logits instead of
        probabilities; ``clusters`` (patients) as given to ``temperatures``.
    temperatures : TemperatureReplicates
        The evaluated rows' temperatures and their refits; its ``spec`` is the bootstrap's.
    metrics : sequence of str
        Metrics with a per-row sum form (as for :func:`~sitecal.stats.disparity_intervals`), compared on
        the same resamples and refits.
    n_bins, min_group_size
        As for :func:`~sitecal.stats.disparity_intervals`.
    fixed : mapping of str to array_like (N, C), optional
        Probability sets of the evaluated rows held fixed (e.g. ``{"before": softmax(logits)}``).

    Returns
    -------
    (dict of str to DisparityResult, dict of str to dict of str to DisparityResult)
        The refitted comparison per metric, and each fixed set's per metric. Point estimates at the
        full-data temperatures; resample ``b`` draws the evaluated patients (stream ``spec.seed``,
        within ``strata``: the draws :func:`disparity_intervals` makes),
        refits the temperatures (:class:`TemperatureReplicates`), calibrates each row with its own and
        computes every group's and complement's metric under the draw's weights. With
        ``spec.method="bca"`` the acceleration comes from the evaluated patients left out one at a time
        at the full-data temperatures (the temperatures' own jackknife is not repeated).
    """
    func = "refit_disparity_intervals"
    z = check_logits(logits, func=func)
    s0 = temperatures.s0
    if s0.shape[0] != z.shape[0]:
        raise DataError(
            f"{func}: 'temperatures' was built for {s0.shape[0]} evaluated rows, not {z.shape[0]}."
        )
    p0 = softmax(z, temperature=np.exp(s0))
    y, grouped, statistics = checked_metrics(p0, labels, groups, metrics, n_bins, min_group_size, func=func)
    plan = _evaluated_plan(clusters, strata, temperatures, z.shape[0], func=func)
    comparisons = {
        name: FixedComparison(
            check_probs(probs, func=func), labels, groups, plan, metrics, n_bins, min_group_size, func=func
        )
        for name, probs in (fixed or {}).items()
    }
    refit = _RefitComparison(
        list(metrics), RefitTerms.of(statistics, z, p0, y), p0, grouped, min_group_size, plan, temperatures
    )
    at_full_data = refit.values(temperatures.s0_solvers[None, :], np.ones((1, plan.n_clusters)))
    reps, fixed_reps = refit.replicates(comparisons)
    refitted = refit.results(at_full_data, reps)
    return refitted, {name: c.results(fixed_reps[name], temperatures.spec) for name, c in comparisons.items()}


def _evaluated_plan(
    clusters: ArrayLike, strata: ArrayLike | None, temperatures: TemperatureReplicates, n: int, *, func: str
) -> ClusterPlan:
    """The evaluated rows' plan: their patients, which must be those ``temperatures`` was built with."""
    (patients,) = cluster_ids(clusters)
    if patients.dtype != temperatures.eval_patients.dtype or not np.array_equal(
        patients, temperatures.eval_patients
    ):
        raise DataError(f"{func}: 'clusters' must be the evaluated patients 'temperatures' was built with.")
    return make_plan(n, patients, strata, func=func)


_GroupAndRest = tuple[NDArray[np.float64], NDArray[np.float64]]  # every group's values and complement's


@dataclass(frozen=True)
class _RefitComparison:
    """The refitted comparison of the evaluated rows' groups: its values, replicates and results.

    ``probs``: the rows' probabilities at the full-data temperatures; ``plan``: the evaluated rows'
    cluster plan, whose draws are the resamples; ``temperatures``: the rows' temperatures and refits.
    """

    metrics: list[str]
    terms: RefitTerms
    probs: NDArray[np.float64]
    grouped: Grouped
    min_group_size: int
    plan: ClusterPlan
    temperatures: TemperatureReplicates

    def values(self, s: NDArray[np.float64], cluster_weights: NDArray[np.float64]) -> list[_GroupAndRest]:
        """Per metric: every group's value and its complement's, (R, G) each.

        ``s``: each resample's temperatures (R, n_solvers); ``cluster_weights``: its plan's (R, K).
        """
        return self.terms.group_and_rest(
            s,
            cluster_weights,
            self.grouped.codes.astype(np.int64),
            self.grouped.names.shape[0],
            workers=self.temperatures.spec.n_workers,
            row_temperature=self.temperatures.solver_of_row,
            row_cluster=self.plan.cluster_of_row,
        )

    def replicates(
        self, comparisons: Mapping[str, FixedComparison]
    ) -> tuple[list[_GroupAndRest], dict[str, list[_GroupAndRest]]]:
        """Per metric, every group's and complement's (B, G) replicates; each fixed set's, on the same draws.

        Resample ``b`` draws the evaluated patients (stream ``spec.seed``, within the plan's strata) and
        refits the temperatures on that draw (:meth:`TemperatureReplicates.chunks`).
        """
        spec, plan = self.temperatures.spec, self.plan
        b, n_groups = spec.n_resamples, self.grouped.names.shape[0]
        n_patients = self.temperatures.patients.shape[0]  # the fit and evaluated patients together
        fixed_reps = {name: c.empty_replicates(b) for name, c in comparisons.items()}
        reps = [(np.empty((b, n_groups)), np.empty((b, n_groups))) for _ in self.metrics]
        # resamples per chunk: the (chunk, patients) draws and weights near 4 * CHUNK_ELEMENTS, so that each
        # temperature's batched solve is called once per chunk of many resamples (its Newton steps are array
        # operations over the chunk) and the solvers' table is read once per chunk
        chunk = spec.chunk_size or max(1, min(b, 4 * CHUNK_ELEMENTS // max(plan.n, n_patients)))
        eval_draws = draw_chunks(plan, seed=spec.seed, n_resamples=b, chunk_size=chunk)
        start = 0
        for draws, s in self.temperatures.chunks(eval_draws, plan, chunk):  # a loop over chunks of resamples
            stop = start + draws.size
            values = self.values(s, draws.weights)
            for (group_reps, rest_reps), (group_v, rest_v) in zip(reps, values, strict=True):
                group_reps[start:stop], rest_reps[start:stop] = group_v, rest_v
            for name, comparison in comparisons.items():  # a loop over the fixed sets: the same draws
                comparison.store(fixed_reps[name], start, stop, comparison.values(draws.indices))
            start = stop
        return reps, fixed_reps

    def results(
        self, at_full_data: list[_GroupAndRest], reps: list[_GroupAndRest]
    ) -> dict[str, DisparityResult]:
        """Per metric, the intervals of the gaps (BCa: each evaluated patient left out once, at ``s0``)."""
        spec, plan, grouped = self.temperatures.spec, self.plan, self.grouped
        too_small = {
            str(grouped.names[i]): int(grouped.sizes[i])
            for i in range(grouped.names.shape[0])
            if grouped.sizes[i] < self.min_group_size
        }
        out = {}
        for metric, statistic, (group, rest), replicates in zip(
            self.metrics, self.terms.statistics, at_full_data, reps, strict=True
        ):
            jackknife = (
                group_jackknife(statistic, self.probs, self.terms.labels, plan, grouped)
                if spec.method == "bca" and plan.n_clusters > 1
                else None
            )
            out[metric] = assemble(
                metric, grouped, too_small, (group[0], rest[0]), replicates, jackknife, spec=spec, plan=plan
            )
        return out
