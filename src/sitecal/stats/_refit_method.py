"""``refit_method_bootstrap``: intervals after any recalibration method, refitted in every resample.

The counterpart of :func:`~sitecal.stats.refit_bootstrap` for the methods of
:data:`sitecal.calibration.METHODS`: resample ``b`` refits the method on the ``b``-th fit resample and
measures the metrics before and after it on the ``b``-th evaluation resample (the same streams, so for
temperature scaling the replicates equal ``refit_bootstrap``'s to the solvers' tolerance). Percentile
intervals only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from sitecal.calibration import METHODS, FittedMethod
from sitecal.errors import DataError
from sitecal.stats._metric_intervals import DEFAULT_METRICS
from sitecal.stats._paired_refit import Arms, crossfit_folds, fit_notes, paired_arms, statistics
from sitecal.stats._refit_result import PROB_SETS
from sitecal.stats._replicate_table import MetricTable, ReplicateTable
from sitecal.stats._resample import ClusterPlan
from sitecal.stats._spec import BootstrapSpec

__all__ = ["MethodRefitIntervals", "refit_method_bootstrap"]

_FUNC = "refit_method_bootstrap"


@dataclass(frozen=True, eq=False)
class MethodRefitIntervals(MetricTable):
    """Metrics before and after a recalibration method refitted in every resample.

    Attributes
    ----------
    method : str
    table : ReplicateTable
        Metrics by ("before", "after") on the evaluation split's sizes: ``metrics``, ``prob_sets``,
        ``spec``, ``estimates`` (M, 2) and ``replicates`` (M, 2, B) read from it, as do :meth:`get` and
        :meth:`difference`.
    fit_plan, eval_plan : ClusterPlan
    fit : FittedMethod
        The method fitted on the whole fit split (the point estimate).
    notes : tuple of str
        The whole split's fit notes, and how many resampled fits stopped before converging.
    """

    method: str
    table: ReplicateTable
    fit_plan: ClusterPlan
    eval_plan: ClusterPlan
    fit: FittedMethod
    notes: tuple[str, ...]


def refit_method_bootstrap(
    fit_logits: ArrayLike,
    fit_labels: ArrayLike,
    eval_logits: ArrayLike,
    eval_labels: ArrayLike,
    *,
    fit_clusters: ArrayLike | None,
    eval_clusters: ArrayLike | None,
    method: str,
    metrics: Sequence[str] = DEFAULT_METRICS,
    n_bins: int = 15,
    spec: BootstrapSpec | None = None,
    fit_folds: ArrayLike | None = None,
    eval_folds: ArrayLike | None = None,
    folds: int | None = None,
    options: Mapping[str, Any] | None = None,
) -> MethodRefitIntervals:
    """Bootstrap the whole fit-then-evaluate procedure of one recalibration method.

    Parameters
    ----------
    fit_logits, fit_labels : array_like, shapes (N_f, C) and (N_f,)
        The rows the method is fitted on.
    eval_logits, eval_labels : array_like, shapes (N_e, C) and (N_e,)
        The held-out rows the metrics are computed on.
    fit_clusters, eval_clusters : array_like or None
        Patient of each row (required keywords; None: each row its own patient).
    method : str
        One of :data:`sitecal.calibration.METHODS`.
    metrics : sequence of str
        Metrics with fixed bins or without bins (not ``"ece_mass"``).
    n_bins : int, default 15
    spec : BootstrapSpec, optional
        Percentile intervals only.
    fit_folds, eval_folds, folds : array_like, array_like, int, optional
        Cross-fitting (all three or none): each row's fold in ``[0, folds)``; an evaluated row of fold
        ``k`` is calibrated by the fit on the fit rows of the other folds, and each resample draws the
        patients of both sets once (the evaluated rows are the fit rows' patients), as
        :func:`~sitecal.stats.crossfit_bootstrap` does.
    options : mapping, optional
        Options of :func:`sitecal.calibration.fit_method` for the method.

    Returns
    -------
    MethodRefitIntervals

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> z = rng.normal(size=(600, 3)) * 3.0
    >>> y = rng.integers(0, 3, 600)  # labels unrelated to the scores: calibration moves toward 1/3
    >>> res = refit_method_bootstrap(z[:300], y[:300], z[300:], y[300:], fit_clusters=None,
    ...                              eval_clusters=None, method="vector", metrics=("nll",),
    ...                              spec=BootstrapSpec(n_resamples=100))
    >>> bool(res.difference("nll").high < 0)
    True
    """
    spec = BootstrapSpec() if spec is None else spec
    if method not in METHODS:
        raise DataError(
            f"The 'method' parameter of {_FUNC} must be one of {', '.join(METHODS)}. Got {method!r}."
        )
    arms = paired_arms(
        _FUNC,
        (fit_logits, fit_labels, fit_clusters),
        (eval_logits, eval_labels, eval_clusters),
        (None, method),
        statistics(_FUNC, metrics, n_bins),
        spec,
        {method: options or {}},
        crossfit_folds(_FUNC, fit_folds, eval_folds, folds),
    )
    return _intervals(method, tuple(metrics), arms, spec)


def _intervals(
    method: str, metrics: tuple[str, ...], arms: Arms, spec: BootstrapSpec
) -> MethodRefitIntervals:
    """The intervals of the arms (uncalibrated, then ``method``) by metric (see refit_method_bootstrap)."""
    fit = arms.fits[1]
    assert fit is not None  # the method's arm
    table = ReplicateTable.from_plan(
        metrics,
        PROB_SETS,
        np.ascontiguousarray(arms.estimates.T),
        np.ascontiguousarray(arms.replicates.transpose(1, 0, 2)),
        spec=spec,
        plan=arms.eval_plan,
        owner="MethodRefitIntervals",
    )
    return MethodRefitIntervals(
        method=method,
        table=table,
        fit_plan=arms.fit_plan,
        eval_plan=arms.eval_plan,
        fit=fit,
        notes=fit_notes(fit, arms.not_converged[1], spec.n_resamples),
    )
