"""The refit bootstraps' passes at moving temperatures, and the temperature fit's per-row terms.

Each computes what the numpy code computes, in its order, around numpy's own ``exp`` and ``log``, so the
values are the same bit for bit with fewer passes over the rows.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from sitecal._kernels._compile import compiled
from sitecal._kernels._terms import _bin_of, top_label_entries_reference, weighted_entry_sums_reference

__all__ = ["PROGRAMS", "calibrated_entry_sums", "nll_row_terms"]

#: Functions the kernels here call on each row (see ``compiled``).
_HELPERS = ("_bin_of",)

#: The row terms :func:`calibrated_entry_sums` computes itself, by name: top-label blocks (as
#: :func:`top_label_entries`), or a mean score's term: ``log_true`` the negative log-probability of the
#: true class (clipped), ``squared`` the squared distance to the one-hot label, ``hit`` arg-max = label.
PROGRAMS = ("top_label", "log_true", "squared", "hit")
_NLL_CLIP = 1e-12  # sitecal.metrics._scores.NLL_CLIP (this layer imports no metrics)


def _drawn_scaled(
    logits_t: NDArray[np.float64],
    row_cluster: NDArray[np.int64],
    cluster_weights: NDArray[np.float64],
    row_scale: NDArray[np.int64],
    scales: NDArray[np.float64],
    scaled: NDArray[np.float64],
    rows: NDArray[np.int64],
    weights: NDArray[np.float64],
    row_weights: NDArray[np.float64],
) -> int:  # pragma: no cover - compiled
    n_classes = logits_t.shape[0]
    # each row's weight first, in a pass of its own: the scattered reads of the clusters' weights overlap
    # there, where the calibration's dependent work would hold them up
    for i in range(row_cluster.shape[0]):
        row_weights[i] = cluster_weights[row_cluster[i]]
    m = 0
    for i in range(row_cluster.shape[0]):
        w = row_weights[i]
        if w == 0.0:
            continue
        scale = scales[row_scale[i]]
        top = logits_t[0, i] / scale
        scaled[0, m] = top
        for k in range(1, n_classes):
            v = logits_t[k, i] / scale
            scaled[k, m] = v
            top = max(top, v)
        for k in range(n_classes):
            scaled[k, m] -= top
        rows[m] = i
        weights[m] = w
        m += 1
    return m


def _normalised(
    e: NDArray[np.float64],
    m: int,
    rows: NDArray[np.int64],
    labels: NDArray[np.int64],
    groups: NDArray[np.int64],
    predicted: NDArray[np.int64],
    confidence: NDArray[np.float64],
    label: NDArray[np.int64],
    group: NDArray[np.int64],
) -> None:  # pragma: no cover - compiled
    n_classes = e.shape[0]
    for j in range(m):
        total = e[0, j]
        for k in range(1, n_classes):  # the sum in class order, as numpy sums so few terms
            total += e[k, j]
        best = -1.0
        top = 0
        for k in range(n_classes):
            v = e[k, j] / total
            e[k, j] = v
            if v > best:  # the first arg-max, as numpy.argmax (probabilities are >= 0)
                best = v
                top = k
        predicted[j] = top
        confidence[j] = best
        i = rows[j]
        label[j] = labels[i]
        group[j] = groups[i]


def _top_label_sums(
    m: int,
    predicted: NDArray[np.int64],
    confidence: NDArray[np.float64],
    label: NDArray[np.int64],
    group: NDArray[np.int64],
    weights: NDArray[np.float64],
    edges: NDArray[np.float64],
    parts: NDArray[np.int64],
    at: int,
    out: NDArray[np.float64],
) -> None:  # pragma: no cover - compiled
    n_bins = edges.shape[0] - 1
    for j in range(m):
        g = group[j]
        w = weights[j]
        c = confidence[j]
        index = _bin_of(c, edges)
        correct = 1.0 if predicted[j] == label[j] else 0.0
        out[g, at] += w * 1.0
        for b in range(
            parts.shape[0]
        ):  # n count, g correctness minus confidence, a correctness, c confidence
            col = at + index + 1 + b * n_bins
            part = parts[b]
            if part == 0:
                out[g, col] += w * 1.0
            elif part == 1:
                out[g, col] += w * (correct - c)
            elif part == 2:
                out[g, col] += w * correct
            else:
                out[g, col] += w * c


def _true_class(
    e: NDArray[np.float64], m: int, label: NDArray[np.int64], clip: float, out: NDArray[np.float64]
) -> None:  # pragma: no cover - compiled
    for j in range(m):
        out[j] = max(e[label[j], j], clip)


def _squared(
    e: NDArray[np.float64], m: int, label: NDArray[np.int64], out: NDArray[np.float64]
) -> None:  # pragma: no cover - compiled
    for j in range(m):
        squared = 0.0
        for k in range(e.shape[0]):  # the distances summed in class order
            d = e[k, j] - (1.0 if k == label[j] else 0.0)
            squared += d * d
        out[j] = squared


def _hits(
    m: int, predicted: NDArray[np.int64], label: NDArray[np.int64], out: NDArray[np.float64]
) -> None:  # pragma: no cover - compiled
    for j in range(m):
        out[j] = 1.0 if predicted[j] == label[j] else 0.0


def _score_sums(
    m: int,
    values: NDArray[np.float64],
    group: NDArray[np.int64],
    weights: NDArray[np.float64],
    at: int,
    out: NDArray[np.float64],
) -> None:  # pragma: no cover - compiled
    for j in range(m):
        g = group[j]
        w = weights[j]
        out[g, at] += w * 1.0
        out[g, at + 1] += w * values[j]


def calibrated_entry_sums(
    logits_t: NDArray[np.float64],
    labels: NDArray[np.int64],
    groups: NDArray[np.int64],
    n_groups: int,
    row_cluster: NDArray[np.int64],
    cluster_weights: NDArray[np.float64],
    row_scale: NDArray[np.int64],
    scales: NDArray[np.float64],
    edges: NDArray[np.float64],
    programs: list[tuple[str, str]],
    widths: list[int],
    workspace: NDArray[np.float64] | None = None,
) -> NDArray[np.float64]:
    """One resample's per-group sums of metric terms at moving temperatures: (G, sum of widths).

    Row ``i`` (class-major logits ``logits_t`` (C, N), its label and group) weighs
    ``cluster_weights[row_cluster[i]]`` and is calibrated with ``T = scales[row_scale[i]]``; rows of
    weight 0 are skipped. Each metric's terms, program ``(name, blocks)`` of :data:`PROGRAMS` on the
    ``(lo, hi]`` bins of ``edges``, go to its own ``widths[m]`` columns as ``weight * value``, rows in
    order.

    The values are those of the array code, bit for bit: the drawn rows' scaled logits less their max
    (one compiled pass), numpy's ``exp``, a compiled pass that normalises in class order and finds the
    arg-max, then one tight pass per metric (numpy's ``log`` for the ``log_true`` terms):
    :func:`~sitecal.metrics._softmax.softmax_class_major`, :func:`top_label_entries` and the scores'
    terms compute the same operations in the same order.

    ``workspace``: a (C + 7, N) float64 array the call may overwrite, kept by a caller that sums many
    resamples (fresh arrays of this size cost page faults in every call); None: allocated here.
    """
    n_classes, n = logits_t.shape
    space = np.empty((n_classes + 7, n)) if workspace is None else workspace
    scaled, weights, values, confidence = space[:n_classes], *space[n_classes : n_classes + 3]
    rows, predicted, label, group = (row.view(np.int64) for row in space[n_classes + 3 :])
    m: int = compiled(_drawn_scaled)(
        logits_t,
        row_cluster,
        np.ascontiguousarray(cluster_weights, dtype=np.float64),
        row_scale,
        np.ascontiguousarray(scales, dtype=np.float64),
        scaled,
        rows,
        weights,
        values,  # free until the metrics' passes
    )
    np.exp(scaled[:, :m], out=scaled[:, :m])
    compiled(_normalised)(scaled, m, rows, labels, groups, predicted, confidence, label, group)
    out = np.zeros((n_groups, int(sum(widths))))
    at = 0
    for (name, blocks), width in zip(programs, widths, strict=True):  # a loop over metrics: own columns
        if name == "top_label":
            parts = np.array(["ngac".index(b) for b in blocks], dtype=np.int64)
            compiled(_top_label_sums)(m, predicted, confidence, label, group, weights, edges, parts, at, out)
        else:
            if name == "log_true":  # -log max(p_y, clip), numpy's logarithm
                compiled(_true_class)(scaled, m, label, _NLL_CLIP, values)
                np.negative(np.log(values[:m], out=values[:m]), out=values[:m])
            elif name == "squared":
                compiled(_squared)(scaled, m, label, values)
            else:
                compiled(_hits)(m, predicted, label, values)
            compiled(_score_sums)(m, values, group, weights, at, out)
        at += width
    return out


def calibrated_entry_sums_reference(
    logits_t: NDArray[np.float64],
    labels: NDArray[np.int64],
    groups: NDArray[np.int64],
    n_groups: int,
    row_cluster: NDArray[np.int64],
    cluster_weights: NDArray[np.float64],
    row_scale: NDArray[np.int64],
    scales: NDArray[np.float64],
    edges: NDArray[np.float64],
    programs: list[tuple[str, str]],
    widths: list[int],
    workspace: NDArray[np.float64] | None = None,
) -> NDArray[np.float64]:
    """:func:`calibrated_entry_sums` in plain numpy: the reference the tests hold the kernel to, bit for bit.

    The drawn rows' softmax at their temperatures as array operations (sums over the classes in class
    order), each metric's (column, value) terms (:func:`top_label_entries_reference` or a mean score's
    two columns) and their weighted sums per group (:func:`weighted_entry_sums_reference`), side by
    side. ``workspace`` is not used.
    """
    weights = cluster_weights[row_cluster]
    drawn = weights != 0.0
    scaled = logits_t[:, drawn] / scales[row_scale[drawn]]
    e = np.exp(scaled - scaled.max(axis=0))
    probs_t = e / _class_sum(e)
    label, group = labels[drawn], groups[drawn]
    sums = [np.zeros((n_groups, 0))]
    for (name, blocks), width in zip(programs, widths, strict=True):  # a loop over metrics: own columns
        if name == "top_label":
            columns, values = top_label_entries_reference(probs_t, label, edges, blocks)
        else:  # a mean score: column 0 (ones), column 1 (the row's score)
            columns = np.array([[0], [1]])
            values = np.stack([np.ones(label.shape[0]), _score_reference(name, probs_t, label)])
        sums.append(weighted_entry_sums_reference(columns, values, weights[drawn], width, group, n_groups))
    return np.concatenate(sums, axis=1)


def _score_reference(
    name: str, probs_t: NDArray[np.float64], label: NDArray[np.int64]
) -> NDArray[np.float64]:
    """A mean score's row terms (:data:`PROGRAMS`) in plain numpy, for the reference above."""
    if name == "log_true":
        true = probs_t[label, np.arange(label.shape[0])]
        out: NDArray[np.float64] = -np.log(np.maximum(true, _NLL_CLIP))
    elif name == "squared":
        d = probs_t - (np.arange(probs_t.shape[0])[:, None] == label)
        out = _class_sum(d * d)
    else:
        out = (np.argmax(probs_t, axis=0) == label).astype(np.float64)
    return out


def _shifted_scaled(
    d_t: NDArray[np.float64], beta: float, z: NDArray[np.float64], top: NDArray[np.float64]
) -> None:  # pragma: no cover - compiled
    n_classes = d_t.shape[0]
    for i in range(d_t.shape[1]):
        m = beta * d_t[0, i]
        for k in range(1, n_classes):  # the max in class order, as numpy's max over so few classes
            m = max(m, beta * d_t[k, i])
        top[i] = m
        for k in range(n_classes):
            z[k, i] = beta * d_t[k, i] - m


def _moments(
    e: NDArray[np.float64],
    d_t: NDArray[np.float64],
    total: NDArray[np.float64],
    mean_d: NDArray[np.float64],
    var_d: NDArray[np.float64],
) -> None:  # pragma: no cover - compiled
    n_classes = d_t.shape[0]
    for i in range(d_t.shape[1]):
        t = e[0, i]
        for k in range(1, n_classes):
            t += e[k, i]
        total[i] = t
        mean = (e[0, i] / t) * d_t[0, i]
        for k in range(1, n_classes):
            mean += (e[k, i] / t) * d_t[k, i]
        mean_d[i] = mean
        c = d_t[0, i] - mean
        var = (e[0, i] / t) * c * c
        for k in range(1, n_classes):
            c = d_t[k, i] - mean
            var += (e[k, i] / t) * c * c
        var_d[i] = var


def nll_row_terms(
    d_t: NDArray[np.float64], beta: float, workspace: NDArray[np.float64] | None = None
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """The temperature fit's per-row terms of class-major ``d_t`` (C, N): four (N,) arrays.

    Per row: ``m = max_k beta d_k``, ``sum_k exp(beta d_k - m)``, and the mean and variance of ``d``
    under ``softmax(beta d)``.

    The temperature fit's per-row quantities, computed as its numpy code computes them, bit for bit
    (``z = beta * d``; the max and sums in class order; ``p = e / total``; ``(p * d).sum``;
    ``(p * c * c).sum`` with ``c = d - mean``) in two compiled passes around numpy's ``exp``, instead of a
    dozen array passes. ``workspace``: a (C + 4, N) array the call may overwrite.
    """
    n_classes, n = d_t.shape
    space = np.empty((n_classes + 4, n)) if workspace is None else workspace
    z, (top, total, mean_d, var_d) = space[:n_classes], space[n_classes:]
    compiled(_shifted_scaled)(d_t, float(beta), z, top)
    np.exp(z, out=z)
    compiled(_moments)(z, d_t, total, mean_d, var_d)
    return top, total, mean_d, var_d


def nll_row_terms_reference(
    d_t: NDArray[np.float64], beta: float, workspace: NDArray[np.float64] | None = None
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """:func:`nll_row_terms` in plain numpy: the reference the tests hold the kernel to, bit for bit.

    The temperature fit's array code, its sums over the classes in class order; ``workspace`` is not
    used.
    """
    z = beta * d_t
    top = z.max(axis=0)
    e = np.exp(z - top)
    total = _class_sum(e)
    p = e / total
    mean_d = _class_sum(p * d_t)
    c = d_t - mean_d
    var_d = _class_sum(p * c * c)
    return top, total, mean_d, var_d


def _class_sum(terms: NDArray[np.float64]) -> NDArray[np.float64]:
    """The sums over axis 0 (the classes) of (C, N) ``terms``, added in class order as the kernels add.

    Not ``terms.sum(axis=0)``: numpy adds 8 or more terms along a contiguous axis pairwise (a single
    row, or a boolean index's column-major result, puts the classes there).
    """
    out: NDArray[np.float64] = terms[0].copy()
    for row in terms[1:]:  # a loop over classes, in order
        out += row
    return out
