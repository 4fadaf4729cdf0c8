"""The resampling engine's compiled loops against their former forms, at network scale, in one run.

Each row times a loop of ``sitecal._kernels`` on synthetic inputs shaped as at 10⁶ studies (800,000
patients, 3 classes), and the same loop as it was written before (kept here, compiled the same way, as the
baseline), and checks that both give the same numbers bit for bit:

- ``membership_sums`` (the refit bootstraps' solver sums): the drawn patients gathered in a pass of their
  own before they are counted, against one pass that gathers and counts each draw;
- ``counted_sums`` (the fixed-temperature bootstraps): counts cluster-major and sums column-major, against
  resample-major counts and sums;
- ``calibrated_entry_sums`` (the refit's calibrated pass, ECE and NLL): each row's cluster weight gathered
  first, against the weight read inside the calibration loop;
- the size-matched flags' sums (four cases of ECE and NLL before and after): every case in one pass over
  narrow row-major arrays (``grouped_row_sums``), against a pass per case over int64 entry-major arrays.

Times are the best of ``--repeats`` calls (the machine is shared; the best is the least disturbed).

Run:  python benchmarks/bench_counting.py               (10⁶ rows, 800,000 patients)
      python benchmarks/bench_counting.py --rows 100000
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from sitecal._kernels import _calibrated as calibrated_module
from sitecal._kernels import calibrated_entry_sums, counted_sums, grouped_row_sums, membership_sums
from sitecal._kernels._compile import compiled
from sitecal.metrics import metric_statistic, softmax
from sitecal.metrics._binning import bin_edges


def _former_membership_sums(
    indices: Any, patient_of_cluster: Any, ptr: Any, block: Any, table: Any, out: Any, counts: Any
) -> None:  # pragma: no cover - compiled
    width = table.shape[1]
    r = indices.shape[0]
    counts[:] = 0
    for b in range(r):
        for d in range(indices.shape[1]):
            counts[b, patient_of_cluster[indices[b, d]]] += 1
    out[:] = 0.0
    for c in range(counts.shape[1]):
        for e in range(ptr[c], ptr[c + 1]):
            s = block[e]
            for b in range(r):
                w = counts[b, c]
                if w:
                    fw = float(w)
                    for q in range(width):
                        out[b, s, q] += fw * table[e, q]


def _former_counted_sums(
    indices: Any, start: Any, stop: Any, cols: Any, vals: Any, out: Any, counts: Any
) -> None:  # pragma: no cover - compiled
    r = indices.shape[0]
    counts[:] = 0
    for b in range(r):
        for d in range(indices.shape[1]):
            counts[b, indices[b, d]] += 1
    out[:] = 0.0
    for c in range(counts.shape[1]):
        for e in range(start[c], stop[c]):
            col = cols[e]
            value = vals[e]
            for b in range(r):
                out[b, col] += float(counts[b, c]) * value


def _former_drawn_scaled(
    logits_t: Any,
    row_cluster: Any,
    cluster_weights: Any,
    row_scale: Any,
    scales: Any,
    scaled: Any,
    rows: Any,
    weights: Any,
    row_weights: Any,
) -> int:  # pragma: no cover - compiled
    n_classes = logits_t.shape[0]
    m = 0
    for i in range(row_cluster.shape[0]):
        w = cluster_weights[row_cluster[i]]
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


def _former_grouped_sums(
    assigned: Any, columns: Any, values: Any, n_columns: int, out: Any
) -> None:  # pragma: no cover - compiled
    for p in range(assigned.shape[0]):
        for j in range(columns.shape[0]):
            for i in range(columns.shape[1]):
                out[p, assigned[p, i] * n_columns + columns[j, i]] += values[j, i]


def _best(call: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    call()  # compiled, caches warm
    times, out = [], None
    for _ in range(repeats):  # a loop over repeats: the least disturbed
        start = time.perf_counter()
        out = call()
        times.append(time.perf_counter() - start)
    return min(times), out


def _row(name: str, former: float, now: float, same: bool, per: str) -> None:
    print(
        f"| {name} | {former * 1e3:,.1f} | {now * 1e3:,.1f} | {former / now:.2f}x | "
        f"{'yes' if same else 'NO'} | {per} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="studies (default 10^6)")
    parser.add_argument("--repeats", type=int, default=3, help="calls timed per loop (default 3)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    n, k = args.rows, max(1, int(args.rows * 0.8))
    print(f"{n:,} rows, {k:,} patients; ms per call, best of {args.repeats}")
    print("| loop | former, ms | now, ms | speed-up | same numbers | per call |")
    print("| --- | ---: | ---: | ---: | :---: | --- |")

    # the refit's solver sums: 2 table rows a patient (its group's and the global surrogate), 25 coefficients
    r, width, bins = 33, 25, 65
    ptr = np.arange(k + 1, dtype=np.int64) * 2
    block = rng.integers(0, bins, 2 * k).astype(np.int64)
    table = rng.random((2 * k, width))
    patient_of_cluster = rng.permutation(k).astype(np.int64)
    indices = rng.integers(0, k, (r, k))

    def former_membership() -> Any:
        out = np.empty((r, bins, width))
        compiled(_former_membership_sums)(
            indices, patient_of_cluster, ptr, block, table, out, np.empty((r, k), np.int32)
        )
        return out

    a = _best(former_membership, args.repeats)
    b = _best(lambda: membership_sums(indices, patient_of_cluster, ptr, block, table, bins), args.repeats)
    _row("`membership_sums`", a[0], b[0], bool(np.array_equal(a[1], b[1])), f"{r} resamples")

    # the fixed-temperature bootstraps' sums: 8 entries a patient, 480 columns
    per, columns = 8, 480
    start = np.arange(k, dtype=np.int64) * per
    cols = np.sort(rng.integers(0, columns, (k, per)), axis=1).reshape(-1).astype(np.int64)
    vals = rng.random(k * per) + 0.1
    for r in (10, 40):  # a loop over chunk sizes
        drawn = rng.integers(0, k, (r, k))

        def former_counted(drawn: Any = drawn, r: int = r) -> Any:
            out = np.empty((r, columns))
            compiled(_former_counted_sums)(
                drawn, start, start + per, cols, vals, out, np.empty((r, k), np.int32)
            )
            return out

        a = _best(former_counted, args.repeats)
        b = _best(
            lambda drawn=drawn: counted_sums(drawn, start, start + per, cols, vals, columns, True),
            args.repeats,
        )
        _row("`counted_sums`", a[0], b[0], bool(np.array_equal(a[1], b[1])), f"{r} resamples")

    # the refit's calibrated pass: rows in file order, patients numbered by their sorted keys
    z = rng.normal(size=(n, 3)) * 2.2
    z_t = np.ascontiguousarray(z.T)
    y = rng.integers(0, 3, n)
    groups = rng.integers(0, 6, n)
    row_cluster = rng.integers(0, k, n)
    row_scale = rng.integers(0, 60, n)
    weights = np.bincount(rng.integers(0, k, k), minlength=k).astype(np.float64)
    scales = np.exp(rng.normal(0.0, 0.2, 60))
    stats = [metric_statistic(m, n_bins=15) for m in ("ece", "nll")]
    programs = [st.form.program for st in stats]
    widths = [st.row_terms(softmax(z[:1]), y[:1]).shape[1] for st in stats]
    edges = bin_edges(np.empty(0), 15, "width")
    space = np.empty((z.shape[1] + 7, n))

    def calibrated() -> Any:
        return calibrated_entry_sums(
            z_t, y, groups, 6, row_cluster, weights, row_scale, scales, edges, programs, widths, space
        )

    b = _best(calibrated, args.repeats)
    now_pass = calibrated_module._drawn_scaled
    try:  # the former loop in its place, the rest of the call as it is
        calibrated_module._drawn_scaled = _former_drawn_scaled
        a = _best(calibrated, args.repeats)
    finally:
        calibrated_module._drawn_scaled = now_pass
    _row("`calibrated_entry_sums`", a[0], b[0], bool(np.array_equal(a[1], b[1])), "1 resample")

    # the flags' sums: 4 cases (ECE, NLL; before, after), 6 groups, 8 permutations
    p_before, p_after = softmax(z), softmax(z / 1.3)
    cases = [(metric_statistic(m, n_bins=15), p) for m in ("ece", "nll") for p in (p_before, p_after)]
    assigned = rng.integers(0, 6, (8, n))
    terms = [st.sparse_terms(np.ascontiguousarray(p.T), y) for st, p in cases]
    case_widths = [st.row_terms(p[:1], y[:1]).shape[1] for st, p in cases]

    def former_flags() -> Any:
        out = []
        for (c, v), w in zip(terms, case_widths, strict=True):  # a loop over cases
            sums = np.zeros((8, 6 * w))
            compiled(_former_grouped_sums)(
                assigned, np.ascontiguousarray(np.broadcast_to(c, v.shape), np.int64), v, w, sums
            )
            out.append(sums.reshape(8, 6, w))
        return np.concatenate(out, axis=2)

    offsets = np.concatenate([[0], np.cumsum(case_widths)[:-1]])
    fused_columns = np.concatenate(
        [np.broadcast_to(c, v.shape).T + o for (c, v), o in zip(terms, offsets, strict=True)], axis=1
    ).astype(np.uint8)
    fused_values = np.ascontiguousarray(np.concatenate([v.T for _, v in terms], axis=1))
    narrow = assigned.astype(np.uint8)
    a = _best(former_flags, args.repeats)
    b = _best(
        lambda: grouped_row_sums(narrow, fused_columns, fused_values, int(sum(case_widths)), 6),
        args.repeats,
    )
    _row("flags' sums", a[0], b[0], bool(np.array_equal(a[1], b[1])), "8 permutations, 4 cases")


if __name__ == "__main__":
    main()
