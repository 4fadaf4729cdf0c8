"""``crossfit_bootstrap``: intervals of cross-fitted calibrated metrics that include every fold's refit.

Under cross-fitting the rows a temperature is fitted on and the rows it is evaluated on are the same
patients in other folds, so the fit and the evaluation are not independent samples (as they are for one
split, :func:`~sitecal.stats.refit_bootstrap`). Each resample therefore draws the patients once; every
fold's temperature is refitted on the resampled patients of the other folds (all ``B`` fits of a fold in
one batched solve) and the metrics are computed on the resampled evaluated rows, each with its own fold's
temperature: the bootstrap of the whole procedure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sitecal._validation import check_int
from sitecal.calibration import DEFAULT_BOUNDS, BatchedTemperatureSolver, TemperatureFit
from sitecal.errors import DataError
from sitecal.stats._engine_steps import BeforeAfter, checked_spec, checked_split
from sitecal.stats._intervals import interval_result
from sitecal.stats._metric_intervals import DEFAULT_METRICS
from sitecal.stats._refit import _statistics
from sitecal.stats._refit_result import PROB_SETS, _readonly
from sitecal.stats._replicate_table import MetricTable, ReplicateTable
from sitecal.stats._resample import ClusterPlan, Draws, cluster_ids, draw_chunks, make_plan
from sitecal.stats._scale import engine_rows
from sitecal.stats._solver_set import SolverSet
from sitecal.stats._spec import BootstrapResult, BootstrapSpec
from sitecal.stats._term_sums import RefitStatistic

__all__ = ["CrossfitIntervals", "crossfit_bootstrap"]

_FUNC = "crossfit_bootstrap"

#: A batched temperature solver and the patient of each of its clusters (as :class:`SolverSet` takes them).
_Solver = tuple[BatchedTemperatureSolver, NDArray[np.int64]]


@dataclass(frozen=True, eq=False)
class CrossfitIntervals(MetricTable):
    """Intervals of metrics before and after cross-fitted temperatures refitted in every resample.

    Attributes
    ----------
    table : ReplicateTable
        Metrics by ("before", "after") on the evaluated rows: ``metrics``, ``prob_sets``, ``spec``,
        ``estimates`` (M, 2) and ``replicates`` (M, 2, B) read from it, as do :meth:`get` and
        :meth:`difference`.
    fit : TemperatureFit
        The temperature fitted on every fit row (the one deployed); ``temperature`` is its interval.
    fold_fits : tuple of TemperatureFit
        Each fold's temperature, fitted on the other folds' rows.
    log_temperature_replicates : numpy.ndarray, shape (B,)
        The deployed fit's ``log T`` in each resample. Read-only.
    n_fit : int
        Rows fitted on (``n_eval`` and ``n_clusters``, the rows evaluated and the patients resampled,
        are the table's).
    """

    table: ReplicateTable
    fit: TemperatureFit
    fold_fits: tuple[TemperatureFit, ...]
    log_temperature_replicates: NDArray[np.float64]
    n_fit: int

    @property
    def n_eval(self) -> int:
        return self.table.n

    @property
    def n_clusters(self) -> int:
        return self.table.n_clusters

    @property
    def temperature(self) -> BootstrapResult:
        """Interval of the deployed ``T`` (fitted on every fit row)."""
        return interval_result(
            self.fit.temperature,
            np.exp(self.log_temperature_replicates),
            None,
            spec=self.spec,
            n=self.n_fit,
            n_clusters=self.n_clusters,
            n_strata=1,
        )


@dataclass(frozen=True, eq=False)
class _FoldedRows:
    """One set's checked logits (N, C), labels (N,) and folds (N,)."""

    logits: NDArray[np.float64]
    labels: NDArray[np.int64]
    folds: NDArray[np.int64]


def _folds(value: ArrayLike, n: int, folds: int, name: str, func: str) -> NDArray[np.int64]:
    f = np.asarray(value)
    if f.shape != (n,) or not np.issubdtype(f.dtype, np.integer) or (n and (f.min() < 0 or f.max() >= folds)):
        raise DataError(
            f"The {name!r} parameter of {func} must hold each row's fold, an integer in [0, {folds}), "
            f"shape ({n},). Got shape {f.shape}, dtype {f.dtype}."
        )
    return f.astype(np.int64)


def crossfit_bootstrap(
    fit_logits: ArrayLike,
    fit_labels: ArrayLike,
    eval_logits: ArrayLike,
    eval_labels: ArrayLike,
    *,
    fit_clusters: ArrayLike,
    eval_clusters: ArrayLike,
    fit_folds: ArrayLike,
    eval_folds: ArrayLike,
    folds: int,
    metrics: Sequence[str] = DEFAULT_METRICS,
    n_bins: int = 15,
    bounds: tuple[float, float] = DEFAULT_BOUNDS,
    spec: BootstrapSpec | None = None,
) -> CrossfitIntervals:
    r"""Bootstrap cross-fitted temperature scaling: every fold refitted in every resample.

    Parameters
    ----------
    fit_logits, fit_labels : array_like, shapes (N_f, C) and (N_f,)
        The rows temperatures are fitted on (a group's rows, or every row for a global temperature).
    eval_logits, eval_labels : array_like, shapes (N_e, C) and (N_e,)
        The rows evaluated (a group's rows), usually also among the fit rows.
    fit_clusters, eval_clusters : array_like of str
        Patient of each row; a patient's rows in both sets are resampled together.
    fit_folds, eval_folds : array_like of int
        Fold of each row, in ``[0, folds)``; patients nest in folds.
    folds : int
        ``K``: the temperature for fold ``k`` is fitted on the fit rows of the other folds.
    metrics, n_bins, bounds, spec
        As for :func:`~sitecal.stats.refit_bootstrap` (percentile intervals only).

    Returns
    -------
    CrossfitIntervals

    Notes
    -----
    Resample ``b`` draws patient weights ``w_b`` over the union of both sets' patients (stream
    ``spec.seed``), fits :math:`\hat s_{k,b} = \arg\min_s \sum_{i: f_i \ne k} w_{b,p(i)} \ell_i(s)` for each
    fold, and computes each metric on the evaluated rows under the weights ``w_b``, row ``i`` calibrated
    with :math:`e^{\hat s_{f_i, b}}`; "before" uses the same weights, so the change is paired. The
    deployed temperature (all fit rows) is refitted under ``w_b`` too, for its interval.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> z = rng.normal(size=(300, 2)) * 3.0
    >>> y = (rng.random(300) < 1 / (1 + np.exp(-(z[:, 1] - z[:, 0]) / 2))).astype(int)
    >>> p = np.array([f"p{i}" for i in range(300)])
    >>> f = np.arange(300) % 3
    >>> res = crossfit_bootstrap(z, y, z, y, fit_clusters=p, eval_clusters=p, fit_folds=f,
    ...                          eval_folds=f, folds=3, spec=BootstrapSpec(n_resamples=100))
    >>> t = res.temperature
    >>> bool(t.low < t.estimate < t.high), len(res.fold_fits)
    (True, 3)
    """
    spec = _percentile_spec(spec)
    k = check_int(folds, name="folds", func=_FUNC, minimum=2)
    zf, yf = checked_split(fit_logits, fit_labels, which="fit", func=_FUNC)
    ze, ye = checked_split(eval_logits, eval_labels, which="eval", func=_FUNC)
    if zf.shape[1] != ze.shape[1]:
        raise DataError(
            f"The 'eval_logits' parameter of {_FUNC} must have {zf.shape[1]} classes like 'fit_logits'."
        )
    ff = _folds(fit_folds, zf.shape[0], k, "fit_folds", _FUNC)
    fe = _folds(eval_folds, ze.shape[0], k, "eval_folds", _FUNC)
    names, stats = _statistics(metrics, n_bins, method=spec.method)
    plan = _patient_plan(fit_clusters, eval_clusters, zf.shape[0], ze.shape[0])
    return _bootstrap(_FoldedRows(zf, yf, ff), _FoldedRows(ze, ye, fe), plan, names, stats, k, bounds, spec)


def _percentile_spec(spec: BootstrapSpec | None) -> BootstrapSpec:
    """``spec`` (default ``BootstrapSpec()``), checked to ask for percentile intervals."""
    spec = checked_spec(spec, func=_FUNC)
    if spec.method != "percentile":
        raise DataError(
            f"{_FUNC} gives percentile intervals only (BCa's acceleration would need every fold refitted "
            f"without each patient). Got method {spec.method!r}."
        )
    return spec


def _patient_plan(fit_clusters: ArrayLike, eval_clusters: ArrayLike, n_fit: int, n_eval: int) -> ClusterPlan:
    """The plan of both sets' patients, the fit rows' first; evaluated and fit-only patients drawn apart.

    Evaluated patients and fit-only ones are drawn apart (strata), so that every resample holds as many
    evaluated patients as the data (as refit_bootstrap draws the evaluated split on its own): drawn
    together, a small group's rows are all missing from some resamples (about e^-n of them for n
    patients) and its metrics are undefined there. Every patient evaluated: one stratum, the same draws.
    """
    patients = np.concatenate(cluster_ids(fit_clusters, eval_clusters))
    if patients.shape[0] != n_fit + n_eval:
        raise DataError(f"The cluster parameters of {_FUNC} must name one patient per row of each set.")
    held_patients = np.isin(patients, patients[n_fit:])
    return make_plan(patients.shape[0], patients, None if held_patients.all() else held_patients, func=_FUNC)


def _bootstrap(
    fit_rows: _FoldedRows,
    eval_rows: _FoldedRows,
    plan: ClusterPlan,
    names: tuple[str, ...],
    stats: Sequence[RefitStatistic],
    folds: int,
    bounds: tuple[float, float],
    spec: BootstrapSpec,
) -> CrossfitIntervals:
    """The cross-fitted bootstrap of checked rows on the patients' ``plan`` (see crossfit_bootstrap)."""
    rows = engine_rows(names, stats)  # and the studentised interval's companions
    n_fit, n_eval = fit_rows.logits.shape[0], eval_rows.logits.shape[0]
    deployed, fold_solvers = _solvers(fit_rows, plan.cluster_of_row[:n_fit], folds, bounds)
    s0 = np.array([s.fit.log_temperature for s, _ in fold_solvers])
    # "before" from per-patient sums counted over each resample's draws, as bootstrap_metrics sums the
    # evaluated rows on this plan (the same draws where the evaluated rows hold every patient)
    eval_plan = dataclasses.replace(plan, n=n_eval, cluster_of_row=plan.cluster_of_row[n_fit:])
    pairs = BeforeAfter.of(rows.statistics, eval_rows.logits, eval_rows.labels, eval_plan, eval_rows.folds)
    estimates = pairs.estimates(s0[eval_rows.folds][None, :])
    chunk = pairs.chunk_size(spec, max(plan.n_clusters, n_eval))
    s_rep = np.empty(spec.n_resamples)
    draws = draw_chunks(plan, seed=spec.seed, n_resamples=spec.n_resamples, chunk_size=chunk)
    refits = _refitted(SolverSet([deployed, *fold_solvers], plan.n_clusters), draws, s_rep)
    replicates = pairs.replicates(refits, spec.n_resamples, spec.n_workers)
    estimates, replicates = rows.on_metric_scale(estimates, replicates)
    table = ReplicateTable(
        rows=names,
        columns=PROB_SETS,
        estimates=estimates,
        replicates=replicates,
        spec=spec,
        n=int(n_eval),
        n_clusters=plan.n_clusters,
        owner="CrossfitIntervals",
    )
    return CrossfitIntervals(
        table=table,
        fit=deployed[0].fit,
        fold_fits=tuple(s.fit for s, _ in fold_solvers),
        log_temperature_replicates=_readonly(s_rep),
        n_fit=int(n_fit),
    )


def _solvers(
    rows: _FoldedRows, fit_codes: NDArray[np.int64], folds: int, bounds: tuple[float, float]
) -> tuple[_Solver, list[_Solver]]:
    """The deployed temperature's solver (every fit row) and each fold's (the other folds' fit rows).

    ``fit_codes``: each fit row's patient, an index into the plan's clusters.
    """
    deployed = _solver(rows, fit_codes, np.ones(rows.logits.shape[0], dtype=bool), bounds)
    fold_solvers = []
    for fold in range(folds):  # a loop over folds
        used = rows.folds != fold
        if not used.any():
            raise DataError(f"{_FUNC}: fold {fold} has no fit rows in the other folds; use fewer folds.")
        fold_solvers.append(_solver(rows, fit_codes, used, bounds))
    return deployed, fold_solvers


def _solver(
    rows: _FoldedRows, fit_codes: NDArray[np.int64], used: NDArray[np.bool_], bounds: tuple[float, float]
) -> _Solver:
    """The batched solver of the fit rows ``used``, and the patient of each of its clusters."""
    patients, local = np.unique(fit_codes[used], return_inverse=True)
    solver = BatchedTemperatureSolver(
        rows.logits[used], rows.labels[used], local, patients.shape[0], bounds=bounds, func=_FUNC
    )
    return solver, patients


def _refitted(
    refits: SolverSet, chunks: Iterator[Draws], deployed: NDArray[np.float64]
) -> Iterator[tuple[Draws, NDArray[np.float64]]]:
    """Each chunk's draws with every fold's log T refitted under them, shape (R, K).

    The deployed fit's log T of each resample (the first of ``refits``) goes to ``deployed`` (B,).
    """
    start = 0
    for draws in chunks:  # a loop over chunks of resamples
        patient_of_cluster = np.arange(
            draws.n_clusters, dtype=np.int64
        )  # the plan's clusters are the patients
        s_all = refits.solve(draws.indices, patient_of_cluster)
        deployed[start : start + draws.size] = s_all[:, 0]
        start += draws.size
        yield draws, s_all[:, 1:]
