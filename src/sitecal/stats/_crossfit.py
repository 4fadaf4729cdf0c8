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
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sitecal._validation import check_int, check_labels, check_logits
from sitecal.calibration import DEFAULT_BOUNDS, BatchedTemperatureSolver, TemperatureFit
from sitecal.errors import DataError
from sitecal.metrics import softmax
from sitecal.stats._evaluators import EvaluatorSet, auto_chunk_size, make_evaluator
from sitecal.stats._intervals import interval_result
from sitecal.stats._metric_intervals import DEFAULT_METRICS
from sitecal.stats._refit import _statistics
from sitecal.stats._refit_result import PROB_SETS, _readonly
from sitecal.stats._replicate_table import MetricTable, ReplicateTable
from sitecal.stats._resample import CHUNK_ELEMENTS, cluster_ids, draw_chunks, make_plan
from sitecal.stats._scale import engine_rows
from sitecal.stats._solver_set import SolverSet
from sitecal.stats._spec import BootstrapResult, BootstrapSpec
from sitecal.stats._term_sums import metrics_at_temperatures

__all__ = ["CrossfitIntervals", "crossfit_bootstrap"]


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
    func = "crossfit_bootstrap"
    spec = BootstrapSpec() if spec is None else spec
    if not isinstance(spec, BootstrapSpec):
        raise DataError(f"The 'spec' parameter of {func} must be a BootstrapSpec. Got {type(spec).__name__}.")
    if spec.method != "percentile":
        raise DataError(
            f"{func} gives percentile intervals only (BCa's acceleration would need every fold refitted "
            f"without each patient). Got method {spec.method!r}."
        )
    k = check_int(folds, name="folds", func=func, minimum=2)
    zf = check_logits(fit_logits, func=func, name="fit_logits")
    yf = check_labels(fit_labels, n=zf.shape[0], n_classes=zf.shape[1], func=func, name="fit_labels")
    ze = check_logits(eval_logits, func=func, name="eval_logits")
    ye = check_labels(eval_labels, n=ze.shape[0], n_classes=ze.shape[1], func=func, name="eval_labels")
    if zf.shape[1] != ze.shape[1]:
        raise DataError(
            f"The 'eval_logits' parameter of {func} must have {zf.shape[1]} classes like 'fit_logits'."
        )
    ff = _folds(fit_folds, zf.shape[0], k, "fit_folds", func)
    fe = _folds(eval_folds, ze.shape[0], k, "eval_folds", func)
    names, plain = _statistics(metrics, n_bins)
    rows_of = engine_rows(names, plain)  # and the studentised interval's companions
    stats = rows_of.statistics

    patients = np.concatenate(cluster_ids(fit_clusters, eval_clusters))
    if patients.shape[0] != zf.shape[0] + ze.shape[0]:
        raise DataError(f"The cluster parameters of {func} must name one patient per row of each set.")
    # evaluated patients and fit-only ones are drawn apart (strata), so that every resample holds as many
    # evaluated patients as the data (as refit_bootstrap draws the evaluated split on its own): drawn
    # together, a small group's rows are all missing from some resamples (about e^-n of them for n
    # patients) and its metrics are undefined there. Every patient evaluated: one stratum, the same draws.
    held_patients = np.isin(patients, patients[zf.shape[0] :])
    plan = make_plan(patients.shape[0], patients, None if held_patients.all() else held_patients, func=func)
    codes = plan.cluster_of_row
    fit_codes, eval_codes = codes[: zf.shape[0]], codes[zf.shape[0] :]

    def solver(rows: NDArray[np.bool_]) -> tuple[BatchedTemperatureSolver, NDArray[np.int64]]:
        used, local = np.unique(fit_codes[rows], return_inverse=True)
        return (
            BatchedTemperatureSolver(zf[rows], yf[rows], local, used.shape[0], bounds=bounds, func=func),
            used,
        )

    deployed = solver(np.ones(zf.shape[0], dtype=bool))
    fold_solvers = []
    for fold in range(k):  # a loop over folds
        rows = ff != fold
        if not rows.any():
            raise DataError(f"{func}: fold {fold} has no fit rows in the other folds; use fewer folds.")
        fold_solvers.append(solver(rows))
    s0 = np.array([s.fit.log_temperature for s, _ in fold_solvers])
    # "before" from per-patient sums counted over each resample's draws, as bootstrap_metrics sums the
    # evaluated rows on this plan (the same draws where the evaluated rows hold every patient)
    eval_plan = dataclasses.replace(plan, n=ze.shape[0], cluster_of_row=eval_codes)
    before = EvaluatorSet([make_evaluator(stat, (softmax(ze), ye), eval_plan) for stat in stats])
    estimates = np.stack(
        [
            before.estimates(plan.n_clusters),
            metrics_at_temperatures(stats, ze, ye, s0[fe][None, :], np.ones((1, ze.shape[0])))[:, 0],
        ],
        axis=1,
    )

    b = spec.n_resamples
    chunk = spec.chunk_size or min(
        max(1, min(b, CHUNK_ELEMENTS // max(plan.n_clusters, ze.shape[0]))),
        auto_chunk_size(before.sized, eval_plan, b),
    )
    s_rep = np.empty(b)
    replicates = np.empty((len(stats), 2, b))
    start = 0
    refits = SolverSet([deployed, *fold_solvers], plan.n_clusters)
    patient_of_cluster = np.arange(plan.n_clusters, dtype=np.int64)  # the plan's clusters are the patients
    for draws in draw_chunks(plan, seed=spec.seed, n_resamples=b, chunk_size=chunk):  # chunks of resamples
        stop = start + draws.size
        s_all = refits.solve(draws.indices, patient_of_cluster)
        s_rep[start:stop], s_fold = s_all[:, 0], s_all[:, 1:]
        replicates[:, 0, start:stop] = before.replicates(draws)
        replicates[:, 1, start:stop] = metrics_at_temperatures(
            stats,
            ze,
            ye,
            s_fold,
            draws.weights,
            workers=spec.n_workers,
            row_temperature=fe,
            row_cluster=eval_codes,
        )
        start = stop
    estimates, replicates = rows_of.on_metric_scale(estimates, replicates)
    table = ReplicateTable(
        rows=names,
        columns=PROB_SETS,
        estimates=estimates,
        replicates=replicates,
        spec=spec,
        n=int(ze.shape[0]),
        n_clusters=plan.n_clusters,
        owner="CrossfitIntervals",
    )
    return CrossfitIntervals(
        table=table,
        fit=deployed[0].fit,
        fold_fits=tuple(s.fit for s, _ in fold_solvers),
        log_temperature_replicates=_readonly(s_rep),
        n_fit=int(zf.shape[0]),
    )
