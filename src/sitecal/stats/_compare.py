"""``compare_methods``: recalibration methods against temperature scaling on held-out data, paired.

Each resample ``b`` draws fit-split patients and, independently, evaluation-split patients (the same
streams as :func:`~sitecal.stats.refit_bootstrap`, so the temperature arm's replicates are that
function's "after" replicates), refits every method on the resampled fit split, and measures each on
the same resampled evaluation split. A method's difference from temperature scaling is then paired: both
arms saw the same patients in every resample, and the interval of the difference includes both fits'
uncertainty.

Every compared measure is lower-is-better (held-out NLL, Brier score, debiased and smooth ECE), so a
method is *better* when the whole interval of its difference lies below zero, *worse* when it lies above,
and otherwise the difference is within resampling noise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from sitecal.calibration import METHODS, FittedMethod
from sitecal.errors import DataError
from sitecal.metrics.registry import BRIER, ECE_DEBIASED, NLL, SMOOTH_ECE
from sitecal.stats._paired_refit import Arms, crossfit_folds, fit_notes, paired_arms, statistics
from sitecal.stats._replicate_table import ReplicateTable, TableView
from sitecal.stats._resample import ClusterPlan
from sitecal.stats._spec import BootstrapResult, BootstrapSpec

__all__ = ["COMPARED_METRICS", "FINDINGS", "REFERENCE_METHOD", "MethodComparison", "compare_methods"]

#: The arm every other method is compared with.
REFERENCE_METHOD = "temperature"
#: Held-out measures compared (all lower-is-better): proper scores, and calibration errors whose bias does
#: not depend on the group's size.
COMPARED_METRICS = (NLL.name, BRIER.name, ECE_DEBIASED.name, SMOOTH_ECE.name)
#: What an interval of ``method - temperature`` says: lies wholly below 0, wholly above 0, straddles 0,
#: or is undefined or degenerate (non-finite replicates, or all equal: it measures no uncertainty).
FINDINGS = ("better", "worse", "no_clear_difference", "no_interval")

_FUNC = "compare_methods"


@dataclass(frozen=True, eq=False)
class MethodComparison(TableView):
    """Held-out measures of each method with paired refit-bootstrap intervals (see :func:`compare_methods`).

    Attributes
    ----------
    table : ReplicateTable
        Methods by metrics, on the evaluation split's sizes: ``methods`` (``"temperature"`` first, then
        the compared methods in the order asked), ``metrics``, ``spec`` (percentile intervals, see
        :func:`compare_methods`), ``estimates`` (each method fitted on the whole fit split, measured on
        the whole evaluation split) and ``replicates`` (resample ``b``: refitted on the ``b``-th fit
        resample, measured on the ``b``-th evaluation resample) read from it.
    fit_plan, eval_plan : ClusterPlan
    fits : Mapping of str to FittedMethod
        Each method's fit on the whole fit split.
    notes : Mapping of str to tuple of str
        Per method, the notes of its fit on the whole split, and how many resampled fits stopped before
        converging.
    options : Mapping of str to Mapping of str to Any
        Per method, the options its fits used.
    """

    table: ReplicateTable
    fit_plan: ClusterPlan
    eval_plan: ClusterPlan
    fits: Mapping[str, FittedMethod]
    notes: Mapping[str, tuple[str, ...]]
    options: Mapping[str, Mapping[str, Any]]

    @property
    def methods(self) -> tuple[str, ...]:
        return self.table.rows

    @property
    def metrics(self) -> tuple[str, ...]:
        return self.table.columns

    def get(self, method: str, metric: str) -> BootstrapResult:
        """Interval of ``metric`` after ``method`` (the evaluation split's sizes)."""
        return self.table.get(method, metric)

    def difference(self, method: str, metric: str) -> BootstrapResult:
        """Interval of ``metric(method) - metric(temperature)`` from the paired replicates."""
        return self.table.difference((method, metric), (REFERENCE_METHOD, metric))

    def finding(self, method: str, metric: str) -> str:
        """One of :data:`FINDINGS` for ``method`` against temperature scaling on ``metric``."""
        return finding_of(self.difference(method, metric))


def finding_of(difference: BootstrapResult) -> str:
    """What an interval of a lower-is-better difference says (one of :data:`FINDINGS`).

    >>> from sitecal.stats import BootstrapResult
    >>> def d(low, high):
    ...     return BootstrapResult(estimate=(low + high) / 2, low=low, high=high, level=0.95,
    ...                            method="percentile", n_resamples=100, seed=0, n=10, n_clusters=10,
    ...                            n_strata=1, standard_error=0.05, bias=0.0)
    >>> finding_of(d(-0.2, -0.01)), finding_of(d(-0.2, 0.1)), finding_of(d(0.01, 0.2))
    ('better', 'no_clear_difference', 'worse')
    """
    low, high = difference.low, difference.high
    # undefined, or degenerate (every replicate equal: one patient, or no variation), measures nothing
    if difference.reason or not (np.isfinite(low) and np.isfinite(high)):
        return "no_interval"
    if high < 0.0:
        return "better"
    if low > 0.0:
        return "worse"
    return "no_clear_difference"


def _methods(methods: Sequence[str]) -> tuple[str, ...]:
    func = _FUNC
    if isinstance(methods, str):
        raise DataError(f"The 'methods' parameter of {func} must be a sequence of names, e.g. ('vector',).")
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise DataError(
            f"The 'methods' parameter of {func} names unknown methods {unknown}; known: {', '.join(METHODS)}."
        )
    if len(set(methods)) != len(methods):
        raise DataError(
            f"The 'methods' parameter of {func} must list each method once. Got {tuple(methods)!r}."
        )
    return (REFERENCE_METHOD, *(m for m in methods if m != REFERENCE_METHOD))


def compare_methods(
    fit_logits: ArrayLike,
    fit_labels: ArrayLike,
    eval_logits: ArrayLike,
    eval_labels: ArrayLike,
    *,
    fit_clusters: ArrayLike | None,
    eval_clusters: ArrayLike | None,
    methods: Sequence[str],
    metrics: Sequence[str] = COMPARED_METRICS,
    n_bins: int = 15,
    spec: BootstrapSpec | None = None,
    fit_folds: ArrayLike | None = None,
    eval_folds: ArrayLike | None = None,
    folds: int | None = None,
    options: Mapping[str, Mapping[str, Any]] | None = None,
) -> MethodComparison:
    r"""Fit each method on the fit split, measure it on the evaluation split, paired with temperature scaling.

    Parameters
    ----------
    fit_logits, fit_labels : array_like, shapes (N_f, C) and (N_f,)
        The rows every method is fitted on.
    eval_logits, eval_labels : array_like, shapes (N_e, C) and (N_e,)
        The held-out rows every method is measured on.
    fit_clusters, eval_clusters : array_like or None
        Patient of each row (required keywords; None: each row its own patient).
    methods : sequence of str
        Methods of :data:`sitecal.calibration.METHODS` to compare; temperature scaling is always the
        first arm (the reference), whether listed or not.
    metrics : sequence of str, default COMPARED_METRICS
        Lower-is-better measures from :data:`sitecal.metrics.METRIC_NAMES` with fixed bins or none.
    n_bins : int, default 15
    spec : BootstrapSpec, optional
        Resamples, level and seed; the method must be ``"percentile"`` (BCa's acceleration would need
        every method refitted without each patient in turn).
    fit_folds, eval_folds, folds : array_like, array_like, int, optional
        Cross-fitting (all three or none): each row's fold in ``[0, folds)``; an evaluated row of fold
        ``k`` is calibrated by the fit on the fit rows of the other folds, and each resample draws the
        patients of both sets once (the evaluated rows are the fit rows' patients), as
        :func:`~sitecal.stats.crossfit_bootstrap` does.
    options : mapping, optional
        Per method, options of :func:`sitecal.calibration.fit_method`, e.g.
        ``{"histogram": {"n_bins": 10}}``.

    Returns
    -------
    MethodComparison

    Notes
    -----
    Resample ``b`` draws fit-split weights ``u_b`` from ``default_rng(fit_stream_seed(spec.seed))`` and
    evaluation-split weights ``v_b`` from ``default_rng(spec.seed)``, as :func:`refit_bootstrap` does, and
    computes for each method :math:`m` and measure :math:`L`

    .. math:: \theta_{m,b} = L\bigl(g_{m}(z^e; \hat\phi_{m,b});\ v_b\bigr), \qquad
              \hat\phi_{m,b} = \arg\min_\phi \textstyle\sum_i u_{b,i}\, \ell_i(\phi),

    so :math:`\theta_{m,b} - \theta_{\mathrm{temperature},b}` is a paired replicate of the difference.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> z = rng.normal(size=(600, 2)) * 3.0
    >>> y = (rng.random(600) < 1 / (1 + np.exp(-(z[:, 1] - z[:, 0]) / 2.0))).astype(int)
    >>> res = compare_methods(z[:300], y[:300], z[300:], y[300:], fit_clusters=None, eval_clusters=None,
    ...                       methods=("vector",), metrics=("nll",), spec=BootstrapSpec(n_resamples=100))
    >>> res.methods, res.finding("vector", "nll")
    (('temperature', 'vector'), 'no_clear_difference')
    """
    spec = BootstrapSpec() if spec is None else spec
    names = _methods(methods)
    arms = paired_arms(
        _FUNC,
        (fit_logits, fit_labels, fit_clusters),
        (eval_logits, eval_labels, eval_clusters),
        names,
        statistics(_FUNC, metrics, n_bins),
        spec,
        options or {},
        crossfit_folds(_FUNC, fit_folds, eval_folds, folds),
    )
    return _comparison(names, tuple(metrics), arms, spec)


def _comparison(
    names: tuple[str, ...], metrics: tuple[str, ...], arms: Arms, spec: BootstrapSpec
) -> MethodComparison:
    """The comparison of the methods ``names`` (the reference first) from their paired arms."""
    fits = {m: fit for m, fit in zip(names, arms.fits, strict=True) if fit is not None}
    table = ReplicateTable.from_plan(
        names,
        metrics,
        arms.estimates,
        arms.replicates,
        spec=spec,
        plan=arms.eval_plan,
        axes=("method", "metric"),
        owner="MethodComparison",
    )
    return MethodComparison(
        table=table,
        fit_plan=arms.fit_plan,
        eval_plan=arms.eval_plan,
        fits=fits,
        notes={
            m: fit_notes(fits[m], n, spec.n_resamples) for m, n in zip(names, arms.not_converged, strict=True)
        },
        options={m: dict(fits[m].options) for m in names},
    )
