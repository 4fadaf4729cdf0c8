"""False alarms and detection of sitecal's anytime-valid monitoring alarms, against fixed-level intervals.

Each series is 12 monthly windows of 6 groups (scanners). Group g's deployed (calibrated) logits are
``z ~ N(0, s_g^2 I)`` over 3 classes, ``s_g`` chosen so the groups' accuracies span about 0.66-0.86;
each group's monthly size is drawn once per series from 50-300 studies. Labels ``y ~ softmax(z / tau)``:
``tau = 1`` is calibrated, ``tau > 1`` over-confident.

Monitored family (fixed in advance), alpha = 0.05 over the whole family and all 12 windows:

- temperature test, margin on tau [0.8, 1.25], both sides (``sitecal.stats.temperature_increments``);
- ECE signed-gap test, margin 0.10, both sides: ``X = conf - correct`` in [-1, 1]
  (``bounded_mean_increments``, sides "greater" against 0.10 and "less" against -0.10);
- accuracy test, margin 0.70 (side "less"), for the groups whose accuracy is well above it (>= 0.78);

each test's e-process is ``changepoint_evalues`` (horizon 12) and an alarm is a first crossing of
``alarm_threshold(0.05, n_tests)``.

Naive comparator (here only, not in sitecal): a fixed-level 95 % interval looked at every window,
alarm when it lies wholly beyond the margin: the fitted temperature's Wald interval (on theta = 1/tau,
observed information), the t-interval of the mean gap and the Wald interval of the accuracy, each on
the window's data alone ("per window") or on all data since go-live ("cumulative"); also with a
Bonferroni level over the family (corrected for the groups and tests, not for the looks).

Scenarios (numpy default_rng, fixed seeds): stable (tau = 1 everywhere), boundary (tau = 1.25, exactly
the margin, in every group and window; the temperature tests only, 6 groups x 2 sides), drift (group
3, 150 studies a month, goes from tau = 1.0 to 1.6 from month 7), and the timing of the core on
12 windows x 100,000 studies for each of 6 groups.

Upper bound (the drift scenario's drifted group, months 7-8 only, 300 studies): the Neyman-Pearson most
powerful fixed-sample test of tau = 1.25 against tau = 1.6 (and 2.0), an oracle that knows the group, the
onset and the alternative, with its critical value from replicates under the null, at alpha, alpha / 6 and
alpha / 27; then sitecal's costs added one at a time on the same series (Ville's threshold, the mixture over
onsets, the grid of alternatives, the other tests), and the evidence a study carries (the KL divergence).

Run:  python benchmarks/monitor_alarms.py               (R = 300 series a scenario; writes monitor_alarms.md)
      python benchmarks/monitor_alarms.py --quick       (R = 40; prints only)
      python benchmarks/monitor_alarms.py --bound-only  (the upper bound alone; prints only; with --quick too)
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
from _wilson import wilson_text
from scipy.stats import norm
from scipy.stats import t as student_t

from sitecal.stats import (
    DEFAULT_BET_FRACTIONS,
    DEFAULT_TEMPERATURE_FACTORS,
    alarm_threshold,
    bounded_mean_increments,
    changepoint_evalues,
    temperature_increments,
)

CLASSES = 3
GROUPS = 6
WINDOWS = 12
SCALES = np.array([1.35, 1.75, 2.2, 2.7, 3.3, 4.0])  # logit scale of each group
ACCURACY_MONITORED = np.array([False, False, False, True, True, True])  # accuracy >= 0.78 at tau = 1
TAU_LOW, TAU_HIGH, GAP_MARGIN, ACC_MARGIN, ALPHA = 0.8, 1.25, 0.10, 0.70, 0.05
DRIFT_GROUP, DRIFT_SIZE, DRIFT_TAU, DRIFT_START = 2, 150, 1.6, 6  # 0-based window 6 = month 7
SEEDS = {"stable": 1001, "boundary": 2002, "drift": 3003, "timing": 4004, "grid": 5005, "bound": 6006}

# tests of a group, in order; the accuracy test only where ACCURACY_MONITORED
TESTS = ("tau_over", "tau_under", "gap_over", "gap_under", "accuracy")


def softmax(v: np.ndarray) -> np.ndarray:
    e = np.exp(v - v.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def draw_window(n: int, scale: float, tau: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    z = rng.normal(size=(n, CLASSES)) * scale
    y = (softmax(z / tau).cumsum(axis=1) > rng.random((n, 1))).argmax(axis=1)
    return z, y


def family_size(scenario: str) -> int:
    if scenario == "boundary":
        return GROUPS * 2
    return GROUPS * 4 + int(ACCURACY_MONITORED.sum())


# ---------------------------------------------------------------- the naive comparator


def fit_theta(z: np.ndarray, s: np.ndarray, seg: np.ndarray, n_seg: int) -> tuple[np.ndarray, np.ndarray]:
    """Per segment: the maximum-likelihood theta of softmax(theta z) and its Wald standard error."""
    theta = np.ones(n_seg)
    for _ in range(60):
        p = softmax(theta[seg, None] * z)
        m1 = (p * z).sum(axis=1)
        m2 = (p * z * z).sum(axis=1)
        grad = np.bincount(seg, m1 - s, minlength=n_seg)
        hess = np.bincount(seg, m2 - m1 * m1, minlength=n_seg)
        step = grad / hess
        theta = np.clip(theta - step, 0.05, 20.0)
        if np.abs(step).max() < 1e-10:
            break
    p = softmax(theta[seg, None] * z)
    m1 = (p * z).sum(axis=1)
    hess = np.bincount(seg, (p * z * z).sum(axis=1) - m1 * m1, minlength=n_seg)
    return theta, 1.0 / np.sqrt(hess)


def mean_se(x: np.ndarray, seg: np.ndarray, n_seg: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = np.bincount(seg, minlength=n_seg).astype(float)
    mean = np.bincount(seg, x, minlength=n_seg) / n
    var = (np.bincount(seg, x * x, minlength=n_seg) - n * mean**2) / (n - 1)
    return mean, np.sqrt(np.maximum(var, 0.0) / n), n


def naive_alarms(windows: list[list[tuple[np.ndarray, np.ndarray]]], levels: tuple[float, ...]) -> np.ndarray:
    """Naive alarms, shape (levels, 2 kinds [per window, cumulative], GROUPS, len(TESTS), WINDOWS), bool.

    ``levels`` are two-sided levels of the intervals; each alarm is one side lying beyond its margin.
    """
    out = np.zeros((len(levels), 2, GROUPS, len(TESTS), WINDOWS), dtype=bool)
    # rows of all (group, window) cells; a cumulative segment (g, t) takes every window <= t
    z_all, y_all, g_all, w_all = [], [], [], []
    for g in range(GROUPS):
        for w in range(WINDOWS):
            z, y = windows[g][w]
            z_all.append(z)
            y_all.append(y)
            g_all.append(np.full(len(y), g))
            w_all.append(np.full(len(y), w))
    z, y = np.concatenate(z_all), np.concatenate(y_all)
    g, w = np.concatenate(g_all), np.concatenate(w_all)
    s = z[np.arange(len(y)), y]
    p = softmax(z)
    correct = (p.argmax(axis=1) == y).astype(float)
    gap = p.max(axis=1) - correct
    n_seg = GROUPS * WINDOWS
    for kind in range(2):
        if kind == 0:
            rows, seg = np.arange(len(y)), g * WINDOWS + w
        else:
            rows = np.concatenate([np.flatnonzero(w <= t) for t in range(WINDOWS)])
            seg = np.concatenate([g[w <= t] * WINDOWS + t for t in range(WINDOWS)])
        theta, se = fit_theta(z[rows], s[rows], seg, n_seg)
        gap_mean, gap_se, n = mean_se(gap[rows], seg, n_seg)
        acc_mean, _, _ = mean_se(correct[rows], seg, n_seg)
        acc_se = np.sqrt(acc_mean * (1 - acc_mean) / n)
        for i, level in enumerate(levels):
            q = norm.ppf(1 - (1 - level) / 2)
            qt = student_t.ppf(1 - (1 - level) / 2, n - 1)
            cells = [
                theta + q * se < 1 / TAU_HIGH,  # tau's interval wholly above 1.25
                theta - q * se > 1 / TAU_LOW,  # wholly below 0.8
                gap_mean - qt * gap_se > GAP_MARGIN,
                gap_mean + qt * gap_se < -GAP_MARGIN,
                acc_mean + q * acc_se < ACC_MARGIN,
            ]
            for k, cell in enumerate(cells):
                out[i, kind, :, k, :] = cell.reshape(GROUPS, WINDOWS)
    return out


# ---------------------------------------------------------------- one series


def series(task: tuple[str, int]) -> dict[str, np.ndarray]:
    scenario, seed = task
    rng = np.random.default_rng(seed)
    sizes = rng.integers(50, 301, size=GROUPS)
    if scenario == "drift":
        sizes[DRIFT_GROUP] = DRIFT_SIZE
    windows: list[list[tuple[np.ndarray, np.ndarray]]] = []
    for g in range(GROUPS):
        row = []
        for w in range(WINDOWS):
            tau = {"stable": 1.0, "boundary": TAU_HIGH}.get(scenario, 1.0)
            if scenario == "drift" and g == DRIFT_GROUP and w >= DRIFT_START:
                tau = DRIFT_TAU
            row.append(draw_window(int(sizes[g]), float(SCALES[g]), tau, rng))
        windows.append(row)
    # the anytime-valid e-processes, through sitecal's public functions
    log_e = np.full((GROUPS, len(TESTS), WINDOWS), -np.inf)
    accuracy = np.zeros(GROUPS)
    for g in range(GROUPS):
        inc: dict[str, list[np.ndarray]] = {k: [] for k in TESTS}
        for z, y in windows[g]:
            temp = temperature_increments(z, y, margin_low=TAU_LOW, margin_high=TAU_HIGH)
            inc["tau_over"].append(temp.over)
            inc["tau_under"].append(temp.under)
            p = softmax(z)
            correct = (p.argmax(axis=1) == y).astype(float)
            accuracy[g] += correct.mean() / WINDOWS
            if scenario == "boundary":
                continue
            gap = p.max(axis=1) - correct
            inc["gap_over"].append(
                bounded_mean_increments(gap, margin=GAP_MARGIN, side="greater", lower=-1.0, upper=1.0)
            )
            inc["gap_under"].append(
                bounded_mean_increments(gap, margin=-GAP_MARGIN, side="less", lower=-1.0, upper=1.0)
            )
            if ACCURACY_MONITORED[g]:
                inc["accuracy"].append(
                    bounded_mean_increments(correct, margin=ACC_MARGIN, side="less", lower=0.0, upper=1.0)
                )
        for k, name in enumerate(TESTS):
            if inc[name]:
                log_e[g, k] = changepoint_evalues(np.array(inc[name]), horizon=WINDOWS)
    naive, bonferroni = naive_alarms(windows, (0.95, 1 - 2 * ALPHA / family_size(scenario)))
    if scenario == "boundary":  # the temperature tests only
        naive[:, :, 2:, :] = False
        bonferroni[:, :, 2:, :] = False
    else:
        naive[:, ~ACCURACY_MONITORED, 4, :] = False
        bonferroni[:, ~ACCURACY_MONITORED, 4, :] = False
    return {"log_e": log_e, "naive": naive, "bonferroni": bonferroni, "accuracy": accuracy}


def run_scenario(scenario: str, n_series: int, workers: int) -> dict[str, np.ndarray]:
    seeds = np.random.SeedSequence(SEEDS[scenario]).generate_state(n_series)
    tasks = [(scenario, int(s)) for s in seeds]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(series, tasks, chunksize=4))
    return {key: np.stack([r[key] for r in results]) for key in results[0]}


GRID_SIZES = (150, 300, 600, 1200)
GRID_TAUS = (1.6, 2.0, 2.5)


def drift_cell(task: tuple[int, float, int, int]) -> np.ndarray:
    """First alarmed window of one drifting group (its 4 calibration tests), for a chunk of series.

    Months 1-6 at tau = 1, months 7-8 at ``tau``; WINDOWS where no alarm by month 8. The group's alarm
    threshold is the stable family's: the other groups' tests only set the Bonferroni share.
    """
    size, tau, seed, count = task
    threshold = alarm_threshold(ALPHA, family_size("stable"))
    rng = np.random.default_rng(seed)
    firsts = np.full(count, WINDOWS)
    for r in range(count):
        inc: dict[str, list[np.ndarray]] = {k: [] for k in TESTS[:4]}
        for w in range(DRIFT_START + 2):
            z, y = draw_window(size, float(SCALES[DRIFT_GROUP]), tau if w >= DRIFT_START else 1.0, rng)
            temp = temperature_increments(z, y, margin_low=TAU_LOW, margin_high=TAU_HIGH)
            p = softmax(z)
            gap = p.max(axis=1) - (p.argmax(axis=1) == y)
            inc["tau_over"].append(temp.over)
            inc["tau_under"].append(temp.under)
            inc["gap_over"].append(
                bounded_mean_increments(gap, margin=GAP_MARGIN, side="greater", lower=-1, upper=1)
            )
            inc["gap_under"].append(
                bounded_mean_increments(gap, margin=-GAP_MARGIN, side="less", lower=-1, upper=1)
            )
        log_e = np.array([changepoint_evalues(np.array(inc[k]), horizon=WINDOWS) for k in inc])
        hit = (log_e >= threshold).any(axis=0)
        if hit.any():
            firsts[r] = int(hit.argmax())
    return firsts


def run_grid(n_series: int, workers: int) -> dict[tuple[int, float], np.ndarray]:
    cells = [(n, tau) for n in GRID_SIZES for tau in GRID_TAUS]
    chunk = 25
    seeds = np.random.SeedSequence(SEEDS["grid"]).generate_state(
        len(cells) * ((n_series + chunk - 1) // chunk)
    )
    tasks, owners, k = [], [], 0
    for cell in cells:
        for start in range(0, n_series, chunk):
            tasks.append((cell[0], cell[1], int(seeds[k]), min(chunk, n_series - start)))
            owners.append(cell)
            k += 1
    with ProcessPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(drift_cell, tasks))
    out: dict[tuple[int, float], list[np.ndarray]] = {cell: [] for cell in cells}
    for cell, firsts in zip(owners, results, strict=True):
        out[cell].append(firsts)
    return {cell: np.concatenate(v) for cell, v in out.items()}


# ---------------------------------------------------------------- upper bound: the best any valid test

BOUND_TAUS = (1.6, 2.0)  # the drift scenario's tau, and the grid's tau -> 2.0 as a sanity row
BOUND_FAMILIES = (
    1,
    6,
    27,
)  # alpha / K: one test; the six groups' over-confidence sides; the benchmark's family
BOUND_CHUNK_NULL, BOUND_CHUNK_SERIES = 5000, 500
BOUND_NULL_REPS, BOUND_SERIES = 100_000, 10_000


def _log_softmax_at(z: np.ndarray, y: np.ndarray, tau: float) -> np.ndarray:
    """``log softmax(z / tau)_y`` per study; z (..., C), y (...)."""
    v = z / tau
    top = v.max(axis=-1, keepdims=True)
    lse = np.log(np.exp(v - top).sum(axis=-1)) + top[..., 0]
    return np.asarray(np.take_along_axis(v, y[..., None], axis=-1)[..., 0] - lse, dtype=np.float64)


def _draw(
    shape: tuple[int, ...], scale: float, tau: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``draw_window`` for a batch: z of shape (*shape, C), labels y ~ softmax(z / tau)."""
    z = rng.normal(size=(*shape, CLASSES)) * scale
    y = (softmax(z / tau).cumsum(axis=-1) > rng.random((*shape, 1))).argmax(axis=-1)
    return z, y


def bound_null(task: tuple[int, int]) -> np.ndarray:
    """The Neyman-Pearson statistic of each alternative under the null, shape (count, len(BOUND_TAUS)).

    The 2 post-onset months (2 x DRIFT_SIZE studies) with labels drawn at tau = TAU_HIGH, the margin's
    nearer end; the statistic is sum_i log softmax(z_i / tau1)_{y_i} - log softmax(z_i / TAU_HIGH)_{y_i}.
    """
    seed, count = task
    rng = np.random.default_rng(seed)
    z, y = _draw((count, 2 * DRIFT_SIZE), float(SCALES[DRIFT_GROUP]), TAU_HIGH, rng)
    base = _log_softmax_at(z, y, TAU_HIGH)
    return np.stack([(_log_softmax_at(z, y, t1) - base).sum(axis=1) for t1 in BOUND_TAUS], axis=1)


def _gap_increments(gap: np.ndarray, side: str) -> np.ndarray:
    """``bounded_mean_increments`` of the ECE gap test, vectorised over series: (R, N) -> (R, bets)."""
    fractions = np.asarray(DEFAULT_BET_FRACTIONS)
    if side == "greater":
        bets, signed = fractions / (GAP_MARGIN + 1.0), gap - GAP_MARGIN
    else:
        bets, signed = fractions / (1.0 + GAP_MARGIN), -GAP_MARGIN - gap
    return np.asarray(np.log1p(bets[None, :, None] * signed[:, None, :]).sum(axis=2), dtype=np.float64)


def bound_series(task: tuple[float, int, int]) -> dict[str, np.ndarray]:
    """The drifted group's series (months 1-6 at tau = 1, months 7-8 at ``tau``) under every procedure.

    Returns per series: ``np`` the Neyman-Pearson statistic on months 7-8 (tau vs TAU_HIGH); ``oracle``
    its running sum at the end of months 7 and 8 (the oracle's log e-value, shape (R, 2)); the log
    e-values at the end of each month 1-8 of ``onset`` (the oracle's alternative, mixed over the 12
    start windows), ``grid`` (sitecal's over-confidence test: its grid of alternatives, the same
    mixture) and ``sitecal`` (the largest of the group's 4 calibration tests); ``kl_margin`` and
    ``kl_none`` the summed log likelihood ratio of months 7-8 against tau = TAU_HIGH and tau = 1.0.
    The increments are computed here for a batch of series and checked against sitecal's
    ``temperature_increments`` and ``bounded_mean_increments`` on the first series.
    """
    tau, seed, count = task
    rng = np.random.default_rng(seed)
    months = DRIFT_START + 2
    factors = np.asarray(DEFAULT_TEMPERATURE_FACTORS)
    single = np.zeros((count, months, 1))
    over = np.zeros((count, months, factors.size))
    under = np.zeros((count, months, factors.size))
    gap_over = np.zeros((count, months, len(DEFAULT_BET_FRACTIONS)))
    gap_under = np.zeros_like(gap_over)
    kl_margin = np.zeros(count)
    kl_none = np.zeros(count)
    for w in range(months):
        z, y = _draw((count, DRIFT_SIZE), float(SCALES[DRIFT_GROUP]), tau if w >= DRIFT_START else 1.0, rng)
        at_high = _log_softmax_at(z, y, TAU_HIGH)
        at_low = _log_softmax_at(z, y, TAU_LOW)
        at_alt = _log_softmax_at(z, y, tau)
        single[:, w, 0] = (at_alt - at_high).sum(axis=1)
        over[:, w] = np.stack(
            [(_log_softmax_at(z, y, TAU_HIGH * f) - at_high).sum(axis=1) for f in factors], 1
        )
        under[:, w] = np.stack(
            [(_log_softmax_at(z, y, TAU_LOW / f) - at_low).sum(axis=1) for f in factors], 1
        )
        p = softmax(z)
        gap = p.max(axis=-1) - (p.argmax(axis=-1) == y)
        gap_over[:, w] = _gap_increments(gap, "greater")
        gap_under[:, w] = _gap_increments(gap, "less")
        if w >= DRIFT_START:
            kl_margin += single[:, w, 0]
            kl_none += (at_alt - _log_softmax_at(z, y, 1.0)).sum(axis=1)
        # the vectorised increments are sitecal's, checked on the first series
        temp = temperature_increments(z[0], y[0], margin_low=TAU_LOW, margin_high=TAU_HIGH)
        oracle = temperature_increments(
            z[0], y[0], margin_low=TAU_LOW, margin_high=TAU_HIGH, grid=[tau / TAU_HIGH]
        )
        np.testing.assert_allclose(over[0, w], temp.over, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(under[0, w], temp.under, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(single[0, w], oracle.over, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(
            gap_over[0, w],
            bounded_mean_increments(gap[0], margin=GAP_MARGIN, side="greater", lower=-1, upper=1),
            rtol=1e-9,
            atol=1e-9,
        )
        np.testing.assert_allclose(
            gap_under[0, w],
            bounded_mean_increments(gap[0], margin=-GAP_MARGIN, side="less", lower=-1, upper=1),
            rtol=1e-9,
            atol=1e-9,
        )
    grid = changepoint_evalues(over, horizon=WINDOWS)
    tests = np.stack([grid, *(changepoint_evalues(v, horizon=WINDOWS) for v in (under, gap_over, gap_under))])
    return {
        "np": single[:, DRIFT_START:, 0].sum(axis=1),
        "oracle": single[:, DRIFT_START:, 0].cumsum(axis=1),
        "onset": changepoint_evalues(single, horizon=WINDOWS),
        "grid": grid,
        "sitecal": tests.max(axis=0),
        "kl_margin": kl_margin,
        "kl_none": kl_none,
    }


def run_bound(
    n_null: int, n_series: int, workers: int
) -> tuple[np.ndarray, dict[float, dict[str, np.ndarray]]]:
    """The null replicates of the NP statistics, (n_null, len(BOUND_TAUS)), and each tau's series."""
    null_chunks = [min(BOUND_CHUNK_NULL, n_null - s) for s in range(0, n_null, BOUND_CHUNK_NULL)]
    series_chunks = [min(BOUND_CHUNK_SERIES, n_series - s) for s in range(0, n_series, BOUND_CHUNK_SERIES)]
    seeds = np.random.SeedSequence(SEEDS["bound"]).generate_state(
        len(null_chunks) + len(BOUND_TAUS) * len(series_chunks)
    )
    null_tasks = [(int(seeds[k]), c) for k, c in enumerate(null_chunks)]
    k = len(null_chunks)
    series_tasks = []
    for tau in BOUND_TAUS:
        for c in series_chunks:
            series_tasks.append((tau, int(seeds[k]), c))
            k += 1
    with ProcessPoolExecutor(max_workers=workers) as pool:
        null = np.concatenate(list(pool.map(bound_null, null_tasks)))
        parts = list(pool.map(bound_series, series_tasks))
    out: dict[float, dict[str, np.ndarray]] = {}
    for tau in BOUND_TAUS:
        mine = [p for p, t in zip(parts, series_tasks, strict=True) if t[0] == tau]
        out[tau] = {key: np.concatenate([p[key] for p in mine]) for key in mine[0]}
    return null, out


def _detected(log_e: np.ndarray, threshold: float) -> np.ndarray:
    """Alarmed in month 7 or 8 and not before (an alarm before the onset is a miss), per series."""
    first = first_window(log_e >= threshold)
    return (first >= DRIFT_START) & (first <= DRIFT_START + 1)


def bound_section(
    n_null: int,
    n_series: int,
    workers: int,
    say: Callable[..., None],
    measured: dict[float, np.ndarray] | None,
) -> None:
    null, series = run_bound(n_null, n_series, workers)
    n_family = family_size("stable")
    onset, second = DRIFT_START + 1, DRIFT_START + 2
    n_after = 2 * DRIFT_SIZE
    symmetric = 1 - (1 - ALPHA) ** (1 / GROUPS)
    say("### Upper bound: the best any valid test could do")
    say()
    say(
        f"The drift scenario's drifted group alone (group {DRIFT_GROUP + 1}'s logit scale, {DRIFT_SIZE} "
        f"studies a month, tau = 1 in months 1-{DRIFT_START}, then tau1), detected within 2 windows (an "
        f"alarm at the end of month {onset} or {second}; one before month {onset} is a miss). The bound is "
        "the Neyman-Pearson (NP) most powerful fixed-sample test of the simple null tau = "
        f"{TAU_HIGH} (the margin's nearer end) against the simple alternative tau = tau1 on the {n_after} "
        f"studies of months {onset}-{second}: an oracle that knows the group, the onset and tau1 and looks "
        f"once, at the end of month {second}. It rejects when sum_i log softmax(z_i/tau1)_y_i - log "
        f"softmax(z_i/{TAU_HIGH})_y_i exceeds its critical value, the (1 - level) quantile of {n_null:,} "
        f"replicates under the null (logits and labels drawn afresh, labels at tau = {TAU_HIGH}); its power "
        f"is counted on {n_series:,} series a tau1. Why nothing valid beats it: 'tau = 1 in months "
        f"1-{DRIFT_START}, tau = {TAU_HIGH} after' lies inside the null (tau <= {TAU_HIGH} in every study) "
        f"and differs from the alternative only in months {onset}-{second}, where the logits have the same "
        "law under both; a procedure whose chance of alarming there is at most the level, whenever and "
        "however often it looks, has at most the NP test's power."
    )
    say()
    say(
        f"Levels: alpha = {ALPHA} (one test, no multiplicity at all); alpha/{GROUPS} = "
        f"{ALPHA / GROUPS:.5f} (the {GROUPS} groups' over-confidence sides, the least multiplicity a "
        "procedure that names the group needs: one that tests each group on its own data, the same way "
        f"for every group, keeps the family-wise {ALPHA} with independent groups only if each group's level "
        f"is at most 1 - (1 - alpha)^(1/{GROUPS}) = {symmetric:.5f}, and favouring one group costs the "
        f"others); alpha/{n_family} = {ALPHA / n_family:.5f} (the benchmark's family). The e-process rows "
        "add sitecal's costs one at a time, on the same series: (a) the oracle's likelihood-ratio e-value "
        "(tau1 against the margin, from the onset on), looked at monthly against Ville's threshold "
        f"log(K/alpha); (b) the onset unknown: the same likelihood ratio mixed over the {WINDOWS} windows a "
        f"drift may start in, weight 1/{WINDOWS} (`changepoint_evalues`, horizon {WINDOWS}, on months "
        f"1-{second}); (c) the alternative unknown too: sitecal's grid (tau1 = {TAU_HIGH} x "
        f"{', '.join(f'{f:g}' for f in DEFAULT_TEMPERATURE_FACTORS)}, equal weights), which is sitecal's "
        f"over-confidence test; (d) sitecal: the group's 4 calibration tests at the {n_family}-test "
        f"threshold {alarm_threshold(ALPHA, n_family):.3f}."
    )
    say()
    levels = [ALPHA / k for k in BOUND_FAMILIES]
    head = " | ".join(
        f"alpha/{k} = {a:.4f}" if k > 1 else f"alpha = {a}"
        for k, a in zip(BOUND_FAMILIES, levels, strict=True)
    )
    for j, tau in enumerate(BOUND_TAUS):
        res = series[tau]
        n = res["np"].size
        crit = [float(np.quantile(null[:, j], 1 - a)) for a in levels]
        thresholds = [alarm_threshold(ALPHA, k) for k in BOUND_FAMILIES]
        say(f"tau 1.0 -> {tau}, {n:,} series:")
        say()
        say(f"| procedure | {head} |")
        say("| --- | " + " | ".join("---:" for _ in levels) + " |")
        say("| NP critical value (log likelihood ratio) | " + " | ".join(f"{c:.3f}" for c in crit) + " |")
        say("| Ville's threshold log(K/alpha) | " + " | ".join(f"{t:.3f}" for t in thresholds) + " |")
        rows: list[tuple[str, list[np.ndarray]]] = [
            ("NP fixed-sample test, one look at month " + str(second), [res["np"] > c for c in crit]),
            (
                "(a) oracle likelihood-ratio e-value, Ville",
                [(res["oracle"] >= t).any(axis=1) for t in thresholds],
            ),
            (
                "(b) + onset unknown (mixture over 12 start windows)",
                [_detected(res["onset"], t) for t in thresholds],
            ),
            ("(c) + alternative unknown (sitecal's grid)", [_detected(res["grid"], t) for t in thresholds]),
        ]
        for label, hits in rows:
            say(f"| {label} | " + " | ".join(wilson_text(int(h.sum()), n) for h in hits) + " |")
            if label.startswith("NP"):  # the critical value's own Monte Carlo error, as a range of power
                ordered = np.sort(null[:, j])
                spans = []
                for a in levels:
                    tail, half = a * ordered.size, 1.96 * np.sqrt(a * (1 - a) * ordered.size)
                    low = ordered[ordered.size - round(tail - half)]  # fewer null exceedances: stricter
                    high = ordered[ordered.size - round(tail + half)]
                    spans.append(
                        f"{100 * np.mean(res['np'] > low):.1f}-{100 * np.mean(res['np'] > high):.1f} %"
                    )
                say(
                    "| NP power over the critical value's 95 % Monte Carlo range | "
                    + " | ".join(spans)
                    + " |"
                )
        sitecal = _detected(res["sitecal"], thresholds[-1])
        say(f"| (d) sitecal, 4 tests | - | - | {wilson_text(int(sitecal.sum()), n)} |")
        if measured is not None and tau in measured:
            f = measured[tau]
            hit = int(((f >= DRIFT_START) & (f <= DRIFT_START + 1)).sum())
            text = wilson_text(hit, f.size)
            say(f"| (d) sitecal, the grid's cell ({DRIFT_SIZE} a month) above | - | - | {text} |")
        say()
        margin = res["kl_margin"] / n_after
        none = res["kl_none"] / n_after
        se = [float(v.std(ddof=1) / np.sqrt(v.size)) for v in (margin, none)]
        say(
            f"Evidence a study after the onset (mean log likelihood ratio under tau = {tau}, i.e. the KL "
            f"divergence, averaged over the logits): against the margin tau = {TAU_HIGH} "
            f"{margin.mean():.4f} nats (SE {se[0]:.4f}), {n_after * margin.mean():.2f} over months "
            f"{onset}-{second}; "
            f"against no margin (tau = 1.0) {none.mean():.4f} nats (SE {se[1]:.4f}), "
            f"{n_after * none.mean():.2f} over months {onset}-{second}."
        )
        say()


# ---------------------------------------------------------------- summaries


def first_window(alarms: np.ndarray) -> np.ndarray:
    """First alarmed window along the last axis, WINDOWS where none."""
    return np.where(alarms.any(axis=-1), alarms.argmax(axis=-1), WINDOWS)


def false_alarm_rows(res: dict[str, np.ndarray], threshold: float) -> list[tuple[str, str]]:
    n = res["log_e"].shape[0]
    anytime = (res["log_e"] >= threshold).any(axis=(1, 2, 3))
    rows = [("anytime-valid e-processes (sitecal)", wilson_text(int(anytime.sum()), n))]
    for label, key in (("95 % interval", "naive"), ("Bonferroni interval", "bonferroni")):
        for kind, name in ((0, "per window"), (1, "cumulative")):
            hits = res[key][:, kind].any(axis=(1, 2, 3))
            rows.append((f"{label}, {name}, looked at monthly", wilson_text(int(hits.sum()), n)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--bound-only", action="store_true", help="run and print only the upper bound")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    n_series = 40 if args.quick else 300
    n_bound_null, n_bound_series = (20_000, 2_000) if args.quick else (BOUND_NULL_REPS, BOUND_SERIES)
    start = time.perf_counter()
    lines: list[str] = []

    def say(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    if args.bound_only:
        bound_section(n_bound_null, n_bound_series, args.workers, say, None)
        say(f"Upper bound alone: {time.perf_counter() - start:.0f} s.")
        return

    command = "python benchmarks/monitor_alarms.py" + (" --quick" if args.quick else "")
    say("## Monitoring alarms: false alarms and detection (`benchmarks/monitor_alarms.py`)")
    say()
    say(f"Command, run {datetime.date.today().isoformat()} ({args.workers} processes):")
    say()
    say("```")
    say(command)
    say("```")
    say()
    say(
        f"{n_series} series a scenario, {WINDOWS} monthly windows, {GROUPS} groups of 50-300 studies a month "
        f"(drawn once per series), {CLASSES} classes, family-wise alpha = {ALPHA}. Margins: tau in "
        f"[{TAU_LOW}, {TAU_HIGH}], ECE signed gap within ±{GAP_MARGIN}, accuracy above {ACC_MARGIN} "
        "(groups 4-6). Rates with their Wilson 95 % intervals."
    )
    say()

    # stable
    stable = run_scenario("stable", n_series, args.workers)
    n_tests = family_size("stable")
    threshold = alarm_threshold(ALPHA, n_tests)
    say(f"### Stable (tau = 1 in every group and window; {n_tests} tests, alarm at log e >= {threshold:.3f})")
    say()
    acc = stable["accuracy"].mean(axis=0)
    say("Group accuracies (mean over series): " + ", ".join(f"{a:.3f}" for a in acc))
    say()
    say("| method | series with >= 1 false alarm |")
    say("| --- | ---: |")
    for label, text in false_alarm_rows(stable, threshold):
        say(f"| {label} | {text} |")
    say()

    # boundary
    boundary = run_scenario("boundary", n_series, args.workers)
    n_tests_b = family_size("boundary")
    threshold_b = alarm_threshold(ALPHA, n_tests_b)
    say(
        f"### Boundary (tau = {TAU_HIGH}, exactly the margin, in every group and window; the temperature "
        f"tests only: {n_tests_b} tests, alarm at log e >= {threshold_b:.3f})"
    )
    say()
    say("Family-wise (any of the 6 groups x 2 sides):")
    say()
    say("| method | series with >= 1 false alarm |")
    say("| --- | ---: |")
    for label, text in false_alarm_rows(boundary, threshold_b):
        say(f"| {label} | {text} |")
    say()
    # one test alone at level alpha: each group's over-confidence test is a replicate
    single = alarm_threshold(ALPHA, 1)
    n_single = n_series * GROUPS
    one_anytime = (boundary["log_e"][:, :, 0, :] >= single).any(axis=-1)
    one_window = boundary["naive"][:, 0, :, 0, :].any(axis=-1)
    one_cumul = boundary["naive"][:, 1, :, 0, :].any(axis=-1)
    say(
        f"One test alone (a group's over-confidence side, level {ALPHA}; the {n_single} group-series as "
        f"replicates; anytime alarm at log e >= {single:.3f}; the naive interval's side has level 2.5 % "
        "per look):"
    )
    say()
    say("| method | group-series with >= 1 false alarm in 12 months |")
    say("| --- | ---: |")
    say(f"| anytime-valid e-process (sitecal) | {wilson_text(int(one_anytime.sum()), n_single)} |")
    say(f"| 95 % Wald interval of tau, per window | {wilson_text(int(one_window.sum()), n_single)} |")
    say(f"| 95 % Wald interval of tau, cumulative | {wilson_text(int(one_cumul.sum()), n_single)} |")
    say()

    # drift
    drift = run_scenario("drift", n_series, args.workers)
    alarms = drift["log_e"] >= threshold  # (R, G, tests, W)
    group_first = first_window(alarms.any(axis=2))  # (R, G)
    drifted = group_first[:, DRIFT_GROUP]
    early = drifted < DRIFT_START
    within_two = (drifted >= DRIFT_START) & (drifted <= DRIFT_START + 1)
    by_end = (drifted >= DRIFT_START) & (drifted < WINDOWS)
    delays = drifted[by_end] - DRIFT_START + 1  # 1 = alarmed at the end of the first drifted month
    others = np.delete(group_first, DRIFT_GROUP, axis=1)
    clean = (others == WINDOWS).all(axis=1)
    within_text = wilson_text(int(within_two.sum()), n_series)
    by_end_text = wilson_text(int(by_end.sum()), n_series)
    early_hits = alarms[:, DRIFT_GROUP, :, DRIFT_START : DRIFT_START + 2].any(axis=-1).mean(axis=0)
    per_test = ", ".join(f"{name} {100 * float(early_hits[k]):.1f} %" for k, name in enumerate(TESTS[:4]))
    naive_groups = first_window(drift["naive"][:, 0].any(axis=2))
    naive_first = naive_groups[:, DRIFT_GROUP]
    naive_two = int(((naive_first >= DRIFT_START) & (naive_first <= DRIFT_START + 1)).sum())
    naive_clean = int((np.delete(naive_groups, DRIFT_GROUP, axis=1) == WINDOWS).all(axis=1).sum())
    median = f"{float(np.median(delays)):.1f}" if delays.size else "none"
    onset, second = DRIFT_START + 1, DRIFT_START + 2
    say(
        f"### Drift (group {DRIFT_GROUP + 1}, {DRIFT_SIZE} studies a month, tau 1.0 -> {DRIFT_TAU} from "
        f"month {onset}; the model keeps reporting softmax(z); same {n_tests} tests and threshold)"
    )
    say()
    say("| figure | value |")
    say("| --- | ---: |")
    say(f"| drifted group alarmed by the end of month {second} (within 2 windows) | {within_text} |")
    say(f"| drifted group alarmed by the end of month {WINDOWS} | {by_end_text} |")
    say(f"| drifted group alarmed before the drift (false) | {wilson_text(int(early.sum()), n_series)} |")
    say(f"| median delay in months, alarmed series (1 = alarm at the end of month {onset}) | {median} |")
    say(f"| no other group alarmed in 12 months | {wilson_text(int(clean.sum()), n_series)} |")
    say(f"| the drifted group's tests alarmed by month {second} | {per_test} |")
    say(
        f"| naive 95 % per-window interval: drifted group alarmed in months {onset}-{second} | "
        f"{wilson_text(naive_two, n_series)} |"
    )
    say(
        f"| naive 95 % per-window interval: no other group alarmed in 12 months | "
        f"{wilson_text(naive_clean, n_series)} |"
    )
    say()
    grid = run_grid(n_series, args.workers)
    say(
        f"Detection within 2 windows by the drifting group's size and drift (group {DRIFT_GROUP + 1}'s "
        f"logit scale; tau 1.0 in months 1-6, then tau; the 4 calibration tests at the {n_tests}-test "
        f"threshold; {n_series} series a cell; alarms before month {onset} count as misses):"
    )
    say()
    say("| studies a month | " + " | ".join(f"tau -> {t}" for t in GRID_TAUS) + " |")
    say("| ---: | " + " | ".join("---:" for _ in GRID_TAUS) + " |")
    for n in GRID_SIZES:
        cells = []
        for t in GRID_TAUS:
            f = grid[(n, t)]
            cells.append(wilson_text(int(((f >= DRIFT_START) & (f <= DRIFT_START + 1)).sum()), f.size))
        say(f"| {n} | " + " | ".join(cells) + " |")
    say()
    measured = {t: grid[(DRIFT_SIZE, t)] for t in BOUND_TAUS if (DRIFT_SIZE, t) in grid}
    bound_section(n_bound_null, n_bound_series, args.workers, say, measured)

    # timing
    rng = np.random.default_rng(SEEDS["timing"])
    n_big = 100_000
    data = [draw_window(n_big, 2.5, 1.0, rng) for _ in range(WINDOWS)]
    prepared = []
    for z, y in data:
        p = softmax(z)
        correct = (p.argmax(axis=1) == y).astype(float)
        prepared.append((z, y, p.max(axis=1) - correct, correct))
    tic = time.perf_counter()
    for _g in range(GROUPS):
        inc: dict[str, list[np.ndarray]] = {k: [] for k in TESTS}
        for z, y, gap, correct in prepared:
            temp = temperature_increments(z, y, margin_low=TAU_LOW, margin_high=TAU_HIGH)
            inc["tau_over"].append(temp.over)
            inc["tau_under"].append(temp.under)
            inc["gap_over"].append(
                bounded_mean_increments(gap, margin=GAP_MARGIN, side="greater", lower=-1, upper=1)
            )
            inc["gap_under"].append(
                bounded_mean_increments(gap, margin=-GAP_MARGIN, side="less", lower=-1, upper=1)
            )
            inc["accuracy"].append(
                bounded_mean_increments(correct, margin=ACC_MARGIN, side="less", lower=0, upper=1)
            )
        for name in TESTS:
            changepoint_evalues(np.array(inc[name]), horizon=WINDOWS)
    core = time.perf_counter() - tic
    say(
        f"### Timing: the core on {WINDOWS} windows x {n_big:,} studies for each of {GROUPS} groups "
        f"({WINDOWS * n_big * GROUPS:,} studies; all 5 tests a group, one process): {core:.2f} s"
    )
    say()
    say(f"Whole benchmark: {time.perf_counter() - start:.0f} s.")
    if not args.quick:
        out = Path(__file__).with_suffix(".md")
        out.write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
