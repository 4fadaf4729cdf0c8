r"""Metrics in the weighted forms the bootstrap engine (:mod:`sitecal.stats`) evaluates fast.

A bootstrap resample of clusters is a vector of integer weights (how often each cluster, hence each
of its rows, was drawn). Most metrics here are a function of weighted sums of per-row terms,

.. math:: \theta(w) = g\Bigl(\sum_i w_i\, t_i\Bigr), \qquad t_i \in \mathbb{R}^J,

so the engine can sum the terms per cluster once and evaluate a whole chunk of resamples from
``(B, n_clusters)`` weights. Each such metric has a :class:`SumForm` here (``row_terms``, the ``t_i`` of
shape (N, J), and ``from_sums``, ``g`` applied row-wise to shape (B, J)); the metric registry
(:mod:`sitecal.metrics.registry`) names them, and :class:`SumMetricStatistic` packages one for the
engine. With all weights 1 they reproduce the plain metric. Equal-mass ECE has data-dependent bin
edges, which must be recomputed in each resample, so it (:class:`MassECEStatistic`, in
:mod:`sitecal.metrics._mass_weighted`) offers ``prepare`` / ``evaluate`` on per-row weights instead;
so does the smooth ECE (:class:`SmoothECEStatistic`, in :mod:`sitecal.metrics._smooth_weighted`),
whose bandwidth is refitted in each resample.

Not here, because they are not functions of per-cluster sums: the calibration slope and intercept
(a logistic fit per resample) and the AUROC (ranks). Bootstrap them through
:func:`sitecal.stats.bootstrap_interval` with a plain callable ``statistic(probs, labels, weights=W)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sitecal._validation import check_labels, check_probs
from sitecal.metrics._binning import assign_bins, bin_edges
from sitecal.metrics._calibration_error import top_label
from sitecal.metrics._class_major import (
    SparseTerms,
    accuracy_t,
    brier_t,
    nll_t,
    score_entries,
    top_label_entries,
)
from sitecal.metrics._clinical import event_outcome
from sitecal.metrics._debiased import (
    debiased_squared_from_sums,
    debiased_squared_se_from_sums,
    plugin_squared_from_sums,
)
from sitecal.metrics._mass_weighted import MassECEStatistic
from sitecal.metrics._scores import accuracy_terms, brier_terms, nll_terms
from sitecal.metrics._smooth_weighted import SmoothECEStatistic

__all__ = [
    "MassECEStatistic",
    "SmoothECEStatistic",
    "SumForm",
    "SumMetricStatistic",
    "WeightedForm",
    "WeightedStatistic",
    "accuracy_sums",
    "brier_sums",
    "classwise_ece_sums",
    "debiased_ece_sums",
    "ece_sums",
    "mce_sums",
    "nll_sums",
    "oe_ratio_sums",
]


def _validated(
    probs: ArrayLike, labels: ArrayLike, *, func: str
) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    p = check_probs(probs, func=func)
    y = check_labels(labels, n=p.shape[0], n_classes=p.shape[1], func=func)
    return p, y


def _one_hot_columns(
    index: NDArray[np.int64], values: NDArray[np.float64], n_cols: int
) -> NDArray[np.float64]:
    out = np.zeros((index.shape[0], n_cols))
    out[np.arange(index.shape[0]), index] = values
    return out


#: ``row_terms(probs, labels, n_bins, func)``: validated (N, C) probabilities and (N,) labels in, the
#: (N, J) terms out, column 0 all ones (the row count); ``func`` names the caller in error messages.
RowTerms = Callable[[NDArray[np.float64], NDArray[np.int64], int, str], NDArray[np.float64]]
#: ``from_sums(sums, n_bins)``: weighted sums of the terms, (B, J), to the metric, (B,).
FromSums = Callable[[NDArray[np.float64], int], NDArray[np.float64]]
#: ``sparse_terms(probs_t, labels, n_bins)``: the terms of class-major probabilities (C, N) as (columns,
#: values), each (k, N) with k <= J: ``terms[i, columns[j, i]] += values[j, i]`` rebuilds ``row_terms``.
SparseForm = Callable[[NDArray[np.float64], NDArray[np.int64], int], SparseTerms]


@dataclass(frozen=True)
class SumForm:
    """A metric written as ``g(sum_i w_i t_i)``: its per-row terms ``t_i`` and the map ``g``.

    The registry (:mod:`sitecal.metrics.registry`) gives each metric that has such a form one of these;
    calling it with a name and ``n_bins`` packages it as a :class:`SumMetricStatistic`.
    """

    row_terms: RowTerms
    from_sums: FromSums
    sparse_terms: SparseForm | None = None  # None: every column of ``row_terms`` for every row
    # the same terms as a program of the compiled refit loop (sitecal._kernels.PROGRAMS): (name, blocks)
    program: tuple[str, str] | None = None
    # for a metric that is sqrt(max(D, 0)): the signed D from the sums, which the bootstrap engines resample,
    # and its two companions for the studentised interval (sitecal.stats._scale): D's standard error and
    # the plug-in squared error (the bootstrap world's true value), each from the same sums
    signed_from_sums: FromSums | None = None
    se_from_sums: FromSums | None = None
    plug_from_sums: FromSums | None = None

    def __call__(self, name: str, n_bins: int) -> SumMetricStatistic:
        """The metric ``name`` in this form, with ``n_bins`` equal-width bins."""
        return SumMetricStatistic(name=name, form=self, n_bins=n_bins)


@dataclass(frozen=True)
class SumMetricStatistic:
    """A metric written as ``g(sum_i w_i t_i)`` for the bootstrap's sufficient-statistic fast path.

    Use :func:`~sitecal.metrics.metric_statistic` to build one. ``data`` is ``(probs, labels)`` as for
    the metric functions; equal-width bins only (fixed edges, so exact under any weights).

    Attributes
    ----------
    name : str
        The metric's name in :mod:`sitecal.metrics.registry`.
    form : SumForm
        Its terms and the map from their sums to the metric.
    n_bins : int
        Bins of the ECE-family metrics (ignored by the scores).
    """

    name: str
    form: SumForm = field(repr=False)
    n_bins: int = 15
    part: Literal["metric", "signed", "se", "plug"] = "metric"

    def resampled(self) -> SumMetricStatistic:
        r"""The statistic the bootstrap engines resample: the signed estimate, where the metric clamps one.

        For the debiased ECE, :meth:`from_sums` then gives the signed squared estimate :math:`\widehat D`
        (which can be negative) instead of :math:`\sqrt{\max(\widehat D, 0)}`; the engines take the
        square root after studentising (:func:`sitecal.stats.on_metric_scale`). Any other metric: itself.
        """
        return self if self.form.signed_from_sums is None else replace(self, part="signed")

    def companions(self) -> tuple[SumMetricStatistic, ...]:
        """The resampled estimate's standard error and plug-in value, for its studentised interval.

        Empty for a metric without them (every metric but the debiased ECE).
        """
        if self.form.se_from_sums is None or self.form.plug_from_sums is None:
            return ()
        return replace(self, part="se"), replace(self, part="plug")

    def row_terms(self, probs: ArrayLike, labels: ArrayLike) -> NDArray[np.float64]:
        """Per-row terms ``t_i``, shape (N, J); column 0 is always the row count (all ones)."""
        func = f"metric_statistic({self.name!r})"
        p, y = _validated(probs, labels, func=f"{func}.row_terms")
        return self.form.row_terms(p, y, self.n_bins, func)

    def from_sums(self, sums: NDArray[np.float64]) -> NDArray[np.float64]:
        """Compute the metric from weighted sums of the terms, row-wise: shape (B, J) -> (B,)."""
        chosen = {
            "signed": self.form.signed_from_sums,
            "se": self.form.se_from_sums,
            "plug": self.form.plug_from_sums,
        }.get(self.part)
        return (chosen or self.form.from_sums)(sums, self.n_bins)

    def cluster_sums(
        self, probs: ArrayLike, labels: ArrayLike, cluster_of_row: NDArray[np.int64], n_clusters: int
    ) -> NDArray[np.float64]:
        """Per-cluster sums of the terms, (n_clusters, J) in column-major order, each summed in row order.

        The same sums as adding :meth:`row_terms` row by row within each cluster, from the sparse terms in
        one ``numpy.bincount`` (no (N, J) array).
        """
        func = f"metric_statistic({self.name!r})"
        p, y = _validated(probs, labels, func=f"{func}.cluster_sums")
        width = self.form.row_terms(p[:1], y[:1], self.n_bins, func).shape[1]
        columns, values = self.sparse_terms(np.ascontiguousarray(p.T), y)
        keys = columns * n_clusters + cluster_of_row[None, :]
        sums = np.bincount(keys.reshape(-1), values.reshape(-1), minlength=n_clusters * width)
        # column-major (each column contiguous): the bootstrap reads the sums column by column
        out: NDArray[np.float64] = sums.reshape(width, n_clusters).astype(np.float64, copy=False).T
        return out

    def sparse_terms(self, probs_t: NDArray[np.float64], labels: NDArray[np.int64]) -> SparseTerms:
        """The terms of class-major probabilities (C, N) as (columns, values), each (k, N).

        For the hot loops of the refit bootstraps, which compute the probabilities themselves: no checks
        are repeated here (``probs_t`` float64 columns on the simplex, ``labels`` int64 in range).
        ``terms[i, columns[j, i]] += values[j, i]`` rebuilds :meth:`row_terms`.
        """
        if self.form.sparse_terms is not None:
            return self.form.sparse_terms(probs_t, labels, self.n_bins)
        terms = self.form.row_terms(probs_t.T, labels, self.n_bins, f"metric_statistic({self.name!r})").T
        columns = np.broadcast_to(np.arange(terms.shape[0], dtype=np.int64)[:, None], terms.shape)
        return columns, terms

    def __call__(
        self, probs: ArrayLike, labels: ArrayLike, *, weights: NDArray[np.float64]
    ) -> NDArray[np.float64]:
        """Evaluate under per-row weights of shape (B, N); returns (B,)."""
        w = np.atleast_2d(np.asarray(weights, dtype=np.float64))
        return self.from_sums(w @ self.row_terms(probs, labels))


# -- the scores: one term per row, the metric is its weighted mean --


def _score_terms(
    terms: Callable[[NDArray[np.float64], NDArray[np.int64]], NDArray[np.float64]],
    probs: NDArray[np.float64],
    labels: NDArray[np.int64],
    n_bins: int,
    func: str,
) -> NDArray[np.float64]:
    return np.hstack([np.ones((probs.shape[0], 1)), terms(probs, labels)[:, None]])


def _mean_term(sums: NDArray[np.float64], n_bins: int) -> NDArray[np.float64]:
    out: NDArray[np.float64] = sums[:, 1] / sums[:, 0]
    return out


def _score_sparse(
    score: Callable[[NDArray[np.float64], NDArray[np.int64]], NDArray[np.float64]],
    probs_t: NDArray[np.float64],
    labels: NDArray[np.int64],
    n_bins: int,
) -> SparseTerms:
    return score_entries(score, probs_t, labels)


nll_sums = SumForm(
    partial(_score_terms, nll_terms), _mean_term, partial(_score_sparse, nll_t), program=("log_true", "")
)
brier_sums = SumForm(
    partial(_score_terms, brier_terms), _mean_term, partial(_score_sparse, brier_t), program=("squared", "")
)
accuracy_sums = SumForm(
    partial(_score_terms, accuracy_terms),
    _mean_term,
    partial(_score_sparse, accuracy_t),
    program=("hit", ""),
)


# -- observed / expected: a ratio of two sums --


def _oe_terms(
    probs: NDArray[np.float64], labels: NDArray[np.int64], n_bins: int, func: str
) -> NDArray[np.float64]:
    prob, outcome, _ = event_outcome(probs, labels, "auto", func=func)
    return np.stack([np.ones(probs.shape[0]), outcome, prob], axis=1)


def _oe_from_sums(sums: NDArray[np.float64], n_bins: int) -> NDArray[np.float64]:
    with np.errstate(invalid="ignore", divide="ignore"):
        out: NDArray[np.float64] = sums[:, 1] / sums[:, 2]
    return out


oe_ratio_sums = SumForm(_oe_terms, _oe_from_sums)


# -- the ECE family on fixed equal-width bins --


def _classwise_terms(
    probs: NDArray[np.float64], labels: NDArray[np.int64], n_bins: int, func: str
) -> NDArray[np.float64]:
    n, n_classes = probs.shape
    edges = bin_edges(np.empty(0), n_bins, "width")
    # column 1 + k * n_bins + b holds (1[y = k] - p_k) for rows whose p_k is in bin b
    index = assign_bins(probs.reshape(-1), edges).reshape(n, n_classes)
    index = index + n_bins * np.arange(n_classes)[None, :]
    gap = (labels[:, None] == np.arange(n_classes)[None, :]) - probs
    terms = np.zeros((n, n_classes * n_bins))
    np.put_along_axis(terms, index, gap, axis=1)
    return np.hstack([np.ones((n, 1)), terms])


def _classwise_from_sums(sums: NDArray[np.float64], n_bins: int) -> NDArray[np.float64]:
    n_classes = (sums.shape[1] - 1) // n_bins
    out: NDArray[np.float64] = np.abs(sums[:, 1:]).sum(axis=1) / (sums[:, 0] * n_classes)
    return out


classwise_ece_sums = SumForm(_classwise_terms, _classwise_from_sums)


def _top_label_bins(
    probs: NDArray[np.float64], labels: NDArray[np.int64], n_bins: int
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.int64]]:
    """Top-label confidence, correctness and equal-width bin of each row."""
    edges = bin_edges(np.empty(0), n_bins, "width")
    confidence, correct = top_label(probs, labels)
    return confidence, correct, assign_bins(confidence, edges)


def _ece_terms(
    probs: NDArray[np.float64], labels: NDArray[np.int64], n_bins: int, func: str
) -> NDArray[np.float64]:
    confidence, correct, index = _top_label_bins(probs, labels, n_bins)
    gaps = _one_hot_columns(index, correct - confidence, n_bins)
    return np.hstack([np.ones((probs.shape[0], 1)), gaps])


def _ece_from_sums(sums: NDArray[np.float64], n_bins: int) -> NDArray[np.float64]:
    out: NDArray[np.float64] = np.abs(sums[:, 1:]).sum(axis=1) / sums[:, 0]
    return out


ece_sums = SumForm(
    _ece_terms, _ece_from_sums, partial(top_label_entries, parts="g"), program=("top_label", "g")
)


def _mce_terms(
    probs: NDArray[np.float64], labels: NDArray[np.int64], n_bins: int, func: str
) -> NDArray[np.float64]:
    n = probs.shape[0]
    confidence, correct, index = _top_label_bins(probs, labels, n_bins)
    gaps = _one_hot_columns(index, correct - confidence, n_bins)
    counts = _one_hot_columns(index, np.ones(n), n_bins)
    return np.hstack([np.ones((n, 1)), counts, gaps])


def _mce_from_sums(sums: NDArray[np.float64], n_bins: int) -> NDArray[np.float64]:
    counts = sums[:, 1 : 1 + n_bins]
    gaps = np.abs(sums[:, 1 + n_bins :])
    with np.errstate(invalid="ignore", divide="ignore"):
        per_bin = np.where(counts > 0, gaps / np.where(counts > 0, counts, 1.0), -np.inf)
    out: NDArray[np.float64] = per_bin.max(axis=1)
    return out


mce_sums = SumForm(
    _mce_terms, _mce_from_sums, partial(top_label_entries, parts="ng"), program=("top_label", "ng")
)


def _debiased_terms(
    probs: NDArray[np.float64], labels: NDArray[np.int64], n_bins: int, func: str
) -> NDArray[np.float64]:
    n = probs.shape[0]
    confidence, correct, index = _top_label_bins(probs, labels, n_bins)
    # per bin: count, sum of correctness, sum of confidence (correctness is 0/1, so its sum also gives
    # the sum of squares the variance correction needs)
    counts = _one_hot_columns(index, np.ones(n), n_bins)
    corrects = _one_hot_columns(index, correct, n_bins)
    confidences = _one_hot_columns(index, confidence, n_bins)
    return np.hstack([np.ones((n, 1)), counts, corrects, confidences])


def _debiased_part(
    part: Callable[[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]], NDArray[np.float64]],
) -> FromSums:
    def from_sums(sums: NDArray[np.float64], n_bins: int) -> NDArray[np.float64]:
        b = n_bins
        return part(sums[:, 1 : 1 + b], sums[:, 1 + b : 1 + 2 * b], sums[:, 1 + 2 * b :])

    return from_sums


# the signed estimate of the squared error: the engines resample it unclamped and take the square root only
# after studentising (Metric.squared; sitecal.stats.on_metric_scale)
_debiased_squared = _debiased_part(debiased_squared_from_sums)


def _debiased_from_sums(sums: NDArray[np.float64], n_bins: int) -> NDArray[np.float64]:
    out: NDArray[np.float64] = np.sqrt(np.maximum(_debiased_squared(sums, n_bins), 0.0))
    return out


debiased_ece_sums = SumForm(
    _debiased_terms,
    _debiased_from_sums,
    partial(top_label_entries, parts="nac"),
    program=("top_label", "nac"),
    signed_from_sums=_debiased_squared,
    se_from_sums=_debiased_part(debiased_squared_se_from_sums),
    plug_from_sums=_debiased_part(plugin_squared_from_sums),
)


#: What the bootstrap engine evaluates under resampling weights: ``stat(probs, labels, weights=W)``.
WeightedStatistic = SumMetricStatistic | MassECEStatistic | SmoothECEStatistic
#: How the registry packages a metric for the engine: ``form(name, n_bins)`` -> a weighted statistic
#: (a :class:`SumForm`, or :class:`MassECEStatistic` or :class:`SmoothECEStatistic` itself).
WeightedForm = Callable[[str, int], WeightedStatistic]
