"""The compiled per-resample loops against plain numpy, and their independence of threads and chunks."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import sitecal.calibration._batched as batched
from sitecal.calibration import BatchedTemperatureSolver
from sitecal.metrics import metric_statistic, softmax
from sitecal.stats._solver_set import SolverSet
from sitecal.stats._term_sums import term_sums_at_temperatures


def _cohort(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, 3)) * 2.0
    p = softmax(z / 1.5)
    y = (rng.random(n)[:, None] > np.cumsum(p, axis=1)).sum(axis=1).clip(0, 2)
    return z, y, rng.integers(0, 4, n)


def test_term_sums_over_drawn_rows_equal_dense_sums_and_do_not_depend_on_threads() -> None:
    z, y, groups = _cohort(3000, 1)
    rng = np.random.default_rng(2)
    weights = rng.poisson(1.0, (5, 3000)).astype(np.float64)
    s = rng.normal(0.0, 0.2, (5, 3000))
    stats = [metric_statistic(m, n_bins=15) for m in ("ece", "ece_debiased", "nll", "brier", "accuracy")]
    widths = [st.row_terms(softmax(z[:1]), y[:1]).shape[1] for st in stats]
    z_t = np.ascontiguousarray(z.T)
    one = term_sums_at_temperatures(stats, widths, z_t, y, s, weights, groups, 4, workers=1)
    three = term_sums_at_temperatures(stats, widths, z_t, y, s, weights, groups, 4, workers=3)
    for stat, a, b in zip(stats, one, three, strict=True):  # a loop over metrics
        assert np.array_equal(a, b)
        for r in range(5):  # a loop over resamples: the dense reference
            terms = stat.row_terms(softmax(z, temperature=np.exp(s[r])), y)
            dense = np.stack([(weights[r] * (groups == g)) @ terms for g in range(4)])
            np.testing.assert_allclose(a[r], dense, rtol=1e-11, atol=1e-11)


def test_the_compiled_pass_gives_the_array_path_sums_with_indexed_temperatures_and_cluster_weights() -> None:
    """The compiled passes per resample (softmax, terms, sums) give numpy's probabilities' sums, bit for bit.

    Rows take their temperature from a table (a fold's refit) and their weight from their cluster; ties
    of the arg-max (equal logits) and rows of weight 0 are in the data.
    """
    z, y, groups = _cohort(2000, 5)
    z[:40] = z[40:80, :1]  # rows whose classes tie: the first arg-max counts
    rng = np.random.default_rng(6)
    cluster = np.repeat(np.arange(1000), 2)[rng.permutation(2000)]
    weights = rng.poisson(1.0, (4, 1000)).astype(np.float64)
    folds = rng.integers(0, 3, 2000)
    s = rng.normal(0.0, 0.3, (4, 3))
    stats = [
        metric_statistic(m, n_bins=10) for m in ("ece", "mce", "ece_debiased", "nll", "brier", "accuracy")
    ]
    arrays = [dataclasses.replace(st, form=dataclasses.replace(st.form, program=None)) for st in stats]
    widths = [st.row_terms(softmax(z[:1]), y[:1]).shape[1] for st in stats]
    z_t = np.ascontiguousarray(z.T)
    kw = {"row_temperature": folds, "row_cluster": cluster}
    compiled = term_sums_at_temperatures(stats, widths, z_t, y, s, weights, groups, 4, **kw)
    numpy_path = term_sums_at_temperatures(arrays, widths, z_t, y, s, weights, groups, 4, **kw)
    for a, b in zip(compiled, numpy_path, strict=True):  # a loop over metrics: the same operations
        assert np.array_equal(a, b)
    assert compiled[1][..., 1:11].sum() == weights.sum(axis=1).sum() * 2  # mce's bin counts: every draw


@pytest.mark.parametrize("exact", [False, True])
def test_a_solver_set_refits_every_temperature_as_each_solver_does_alone(
    exact: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if exact:  # no surrogate certified: every fit is solved exactly on its own weighted rows
        monkeypatch.setattr(batched, "CERTIFIED_S_ERROR", -1.0)
    z, y, groups = _cohort(2400, 3)
    patient = np.arange(2400) // 2  # two studies a patient
    solvers = []
    for g in range(4):  # a loop over groups: each fitted on the other groups' patients, as folds are
        rows = groups != g
        used, local = np.unique(patient[rows], return_inverse=True)
        solvers.append((BatchedTemperatureSolver(z[rows], y[rows], local, used.shape[0]), used))
    n_patients = 1200
    together = SolverSet(solvers, n_patients)
    indices = np.random.default_rng(4).integers(0, n_patients, (30, n_patients))
    weights = np.stack([np.bincount(i, minlength=n_patients) for i in indices]).astype(np.float64)
    refits = together.solve(indices, np.arange(n_patients))
    if exact:
        assert solvers[0][0].solve(weights[:2][:, solvers[0][1]]).exact.all()
    alone = np.stack([solver.solve(weights[:, used]).log_temperature for solver, used in solvers], axis=1)
    # the same certified fits; the sums behind them are added in another order
    np.testing.assert_allclose(refits, alone, rtol=0, atol=1e-9)
    assert np.array_equal(together.solve(indices[:7], np.arange(n_patients)), refits[:7])


def test_the_loops_still_run_where_numba_finds_no_folder_to_cache_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A read-only install with no writable home compiles in the process instead of failing."""
    import numba.core.caching as caching

    from sitecal import _kernels

    monkeypatch.setattr(caching.CacheImpl, "_locator_classes", [])
    from sitecal._kernels import _compile

    _compile.compiled.cache_clear()
    _compile._jit.cache_clear()
    try:
        out = _kernels.counted_sums(
            np.array([[0, 0, 1]]),
            np.array([0, 1]),
            np.array([1, 2]),
            np.array([0, 0]),
            np.array([2.0, 5.0]),
            1,
        )
        # a kernel calling a compiled helper (the bin of a value)
        columns, _ = _kernels.top_label_entries(
            np.array([[0.25, 0.9], [0.75, 0.1]]), np.array([1, 0]), np.linspace(0.0, 1.0, 5), "n"
        )
    finally:
        _compile.compiled.cache_clear()
        _compile._jit.cache_clear()
    assert out.tolist() == [[9.0]]
    assert columns[1].tolist() == [3, 4]  # 0.75 in (0.5, 0.75], the 3rd bin; 0.9 in the 4th


def test_stratified_draws_are_the_numpy_formula_including_uniforms_that_round_up_to_the_size() -> None:
    from sitecal._kernels import stratified_draws

    rng = np.random.default_rng(8)
    size = rng.integers(1, 50, 400)
    start = rng.integers(0, 1000, 400)
    u = rng.random((3, 400))
    u[0, :5] = np.nextafter(1.0, 0.0)  # the largest uniform: u * size rounds below size, the last cluster
    u[1, :5] = 0.0
    expected = np.minimum(np.floor(u * size).astype(np.int64), size - 1) + start
    assert np.array_equal(stratified_draws(u, size, start), expected)
    assert (stratified_draws(u, size, start) - start < size).all()


def test_drawn_sums_from_sparse_entries_equal_the_dense_constructor_bit_for_bit() -> None:
    """Per-cluster sums built from row entries (no dense array) give the same replicates."""
    from sitecal.stats._drawn_sums import DrawnSums

    rng = np.random.default_rng(9)
    n, k, width = 3000, 200, 7
    cluster = np.sort(rng.integers(0, k, n))
    cluster[:40] = 0  # a cluster of many rows: its cells sum many entries, in row order
    columns = np.stack([np.zeros(n, dtype=np.int64), rng.integers(1, width, n)])
    values = np.stack([np.ones(n), rng.normal(size=n)])
    values[1, :5] = 0.0  # entries of zero: a cell may sum to exactly zero
    dense = np.zeros((k, width))
    np.add.at(dense, (np.broadcast_to(cluster, columns.shape), columns), values)
    sparse = DrawnSums.from_entries(np.broadcast_to(cluster, columns.shape), columns, values, k, width)
    indices = rng.integers(0, k, (6, k))
    assert np.array_equal(sparse(indices), DrawnSums(dense)(indices))
    counts = np.stack([np.bincount(i, minlength=k) for i in indices]).astype(np.float64)
    np.testing.assert_allclose(sparse(indices), counts @ dense, rtol=1e-12, atol=1e-12)


def _clenshaw(coeffs: np.ndarray, x: np.ndarray) -> np.ndarray:
    b1, b2 = np.zeros_like(x), np.zeros_like(x)
    for k in range(coeffs.shape[1] - 1, 0, -1):
        b1, b2 = coeffs[:, k] + 2.0 * x * b1 - b2, b1
    out: np.ndarray = coeffs[:, 0] + x * b1 - b2
    return out


def _numpy_roots(coeffs: np.ndarray, dcoeffs: np.ndarray, errors: np.ndarray) -> tuple:
    """The former array loop of the surrogate's Newton steps: all active rows one step at a time."""
    n = coeffs.shape[0]
    ok = (_clenshaw(coeffs, -np.ones(n)) < -errors) & (_clenshaw(coeffs, np.ones(n)) > errors)
    a, b, x = -np.ones(n), np.ones(n), np.zeros(n)
    active = ok.copy()
    for _ in range(100):
        if not active.any():
            break
        g = _clenshaw(coeffs[active], x[active])
        h = _clenshaw(dcoeffs[active], x[active])
        xa, xb, xs = a[active], b[active], x[active]
        xa = np.where(g < 0, xs, xa)
        xb = np.where(g < 0, xb, xs)
        with np.errstate(divide="ignore", invalid="ignore"):
            newton = xs - g / h
        inside = (h > 0) & (newton > xa) & (newton < xb)
        new = np.where(inside, newton, 0.5 * (xa + xb))
        done = (g == 0) | (np.abs(new - xs) <= 4e-16 * np.maximum(1.0, np.abs(xs))) | (xb - xa <= 4e-16)
        idx = np.flatnonzero(active)
        a[idx], b[idx] = xa, xb
        x[idx] = np.where(g == 0, xs, new)
        active[idx[done]] = False
    return x, _clenshaw(dcoeffs, x), ok


@pytest.mark.parametrize("degree", [1, 2, 5, 13])
def test_the_surrogate_roots_are_the_former_array_loops_bit_for_bit(degree: int) -> None:
    from numpy.polynomial import chebyshev

    from sitecal._kernels import surrogate_roots

    rng = np.random.default_rng(degree)
    coeffs = rng.normal(size=(400, degree))
    coeffs[:200, 1 if degree > 1 else 0] += 3.0  # mostly increasing: bracketed, Newton steps
    coeffs[5, :] = 0.0  # a zero gradient
    coeffs[6, 0] = np.nan
    if degree > 1:
        coeffs[7, :] = 0.0
        coeffs[7, 1] = 1.0  # the root at x = 0 exactly: g == 0 at the first step
    errors = np.abs(rng.normal(size=400)) * 0.05
    errors[8] = 1e9  # never bracketed beyond its error
    dcoeffs = np.asarray(chebyshev.chebder(coeffs, axis=1), dtype=np.float64)
    want = _numpy_roots(coeffs, dcoeffs, errors)
    got = surrogate_roots(coeffs, dcoeffs, errors)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
    if degree > 1:
        assert got[2][:200].sum() > 100 and got[2][7] and got[0][7] == 0.0
    assert not got[2][6] and not got[2][8]


def test_a_solvers_surrogate_fits_are_the_former_array_loops(monkeypatch: pytest.MonkeyPatch) -> None:
    z, y, _ = _cohort(3000, 4)
    solver = BatchedTemperatureSolver(z, y, np.arange(3000) // 3, 1000)
    weights = np.random.default_rng(2).poisson(1.0, (40, 1000)).astype(np.float64)
    got = solver.solve(weights)
    monkeypatch.setattr(batched, "surrogate_roots", _numpy_roots)
    want = solver.solve(weights)
    assert not got.exact.any()  # every fit certified by the surrogate
    np.testing.assert_array_equal(got.log_temperature, want.log_temperature)
    np.testing.assert_array_equal(got.error_bound, want.error_bound)


def test_draw_counts_are_bincounts_per_resample() -> None:
    from sitecal._kernels import draw_counts
    from sitecal.stats._resample import Draws

    rng = np.random.default_rng(3)
    indices = rng.integers(0, 50, (7, 60))
    indices[2] = 4  # one cluster drawn every time
    want = np.stack([np.bincount(i, minlength=50) for i in indices]).astype(np.float64)
    got = draw_counts(indices, 50)
    assert got.dtype == np.float64 and np.array_equal(got, want)
    assert np.array_equal(Draws(indices, 50).weights, want)
    assert draw_counts(np.zeros((0, 5), dtype=np.int64), 3).shape == (0, 3)


def test_grouped_row_sums_of_several_cases_are_per_case_bincounts_bit_for_bit() -> None:
    from sitecal._kernels import grouped_row_sums

    z, y, _ = _cohort(2000, 5)
    rng = np.random.default_rng(6)
    cases = [(metric_statistic(m, n_bins=15), softmax(z / t)) for m, t in (("ece", 1.0), ("nll", 1.3))]
    assigned = rng.integers(0, 5, (3, 2000)).astype(np.uint8)
    columns, values, offsets, at = [], [], [], 0
    for stat, p in cases:  # a loop over cases: their columns side by side
        cols, vals = stat.sparse_terms(np.ascontiguousarray(p.T), y)
        columns.append(np.broadcast_to(cols, vals.shape).T + at)
        values.append(vals.T)
        width = stat.row_terms(p[:1], y[:1]).shape[1]
        offsets.append((at, width, cols, vals))
        at += width
    sums = grouped_row_sums(
        assigned, np.concatenate(columns, axis=1).astype(np.uint8), np.concatenate(values, axis=1), at, 5
    )
    for start, width, cols, vals in offsets:  # a loop over cases: numpy's bincount over (group, column) keys
        for p in range(3):  # a loop over assignments
            keys = assigned[p][None, :].astype(np.int64) * width + np.broadcast_to(cols, vals.shape)
            order = np.argsort(np.broadcast_to(np.arange(2000), vals.shape), axis=None, kind="stable")
            reference = np.bincount(keys.reshape(-1)[order], vals.reshape(-1)[order], minlength=5 * width)
            assert np.array_equal(sums[p, :, start : start + width], reference.reshape(5, width))
