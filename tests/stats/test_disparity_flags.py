"""size_matched_flags: the permutation reference, the max-T adjustment, and what it flags."""

from __future__ import annotations

import numpy as np
import pytest

from sitecal.errors import DataError
from sitecal.metrics import expected_calibration_error, softmax
from sitecal.stats import size_matched_flags, size_matched_flags_each


def _calibrated(n_per_group: tuple[int, ...], seed: int, *, overconfident: str | None = None):
    rng = np.random.default_rng(seed)
    groups = np.concatenate([np.full(n, f"g{n}") for n in n_per_group])
    logits = rng.normal(0.0, 1.6, size=(groups.shape[0], 3))
    probs = softmax(logits)
    truth = probs.copy()
    if overconfident is not None:
        rows = groups == overconfident
        truth[rows] = softmax(logits[rows], temperature=1.8)
    labels = (rng.uniform(size=(groups.shape[0], 1)) > truth.cumsum(axis=1)).sum(axis=1)
    return probs, labels, groups


def test_the_adjusted_p_values_are_those_of_a_brute_force_max_t() -> None:
    # an independent computation: every permutation's assignment rebuilt by hand, each metric computed
    # with the plain ECE function, max-T over the groups
    probs, labels, groups = _calibrated((30, 50, 70), seed=3)
    patients = np.arange(groups.shape[0]) // 2
    res = size_matched_flags(
        probs,
        labels,
        groups,
        clusters=patients,
        metric="ece",
        n_bins=10,
        n_permutations=60,
        seed=11,
        alternative="two-sided",
    )
    names = sorted(set(groups.tolist()))

    def gaps(assign: np.ndarray) -> np.ndarray:
        out = []
        for g in names:
            rows = assign == g
            out.append(
                expected_calibration_error(probs[rows], labels[rows], n_bins=10)
                - expected_calibration_error(probs[~rows], labels[~rows], n_bins=10)
            )
        return np.array(out)

    # rows are already in patient order (patients numbered in row order, two rows each)
    rng = np.random.default_rng(11)
    n_patients = patients.max() + 1
    reps = []
    for _ in range(60):
        rank = rng.permutation(n_patients)
        layout = np.argsort(rank[patients] * 2 + (np.arange(groups.shape[0]) % 2), kind="stable")
        assign = np.empty_like(groups)
        assign[layout] = groups
        reps.append(gaps(assign))
    reps_arr = np.array(reps)
    observed = gaps(groups)
    mean, sd = reps_arr.mean(axis=0), reps_arr.std(axis=0, ddof=1)
    z = np.abs(observed - mean) / sd
    largest = (np.abs(reps_arr - mean) / sd).max(axis=1)
    expected_p = (1 + (largest[:, None] >= z[None, :] - 1e-12).sum(axis=0)) / 61
    assert res.groups == tuple(names)
    np.testing.assert_allclose([res.gap[g] for g in names], observed, rtol=0, atol=1e-12)
    np.testing.assert_allclose([res.expected_gap[g] for g in names], mean, rtol=0, atol=1e-12)
    np.testing.assert_allclose([res.adjusted_p[g] for g in names], expected_p, rtol=0, atol=1e-12)


def test_the_reference_carries_the_size_bias_of_the_plug_in_ece() -> None:
    # a small calibrated group's plug-in ECE gap to a large rest is positive from its size alone; the
    # size-matched reference shows the same, so the group is not flagged
    probs, labels, groups = _calibrated((40, 900), seed=5)
    res = size_matched_flags(probs, labels, groups, clusters=None, n_permutations=300, seed=1)
    assert res.expected_gap["g40"] > 0.05  # the bias a random set of 40 studies shows
    assert res.gap["g40"] > 0.03 and not res.flagged["g40"]
    assert res.adjusted_p["g40"] > 0.05


def test_a_miscalibrated_group_is_flagged_and_the_others_are_not() -> None:
    probs, labels, groups = _calibrated((80, 300, 600), seed=2, overconfident="g300")
    res = size_matched_flags(probs, labels, groups, clusters=None, n_permutations=400, seed=0)
    assert res.flagged["g300"] and res.adjusted_p["g300"] <= 0.05
    assert res.gap["g300"] - res.expected_gap["g300"] > 0.03  # worse than random sets of 300
    assert not res.flagged["g80"]
    # against the rest: the large group is better than a rest that holds the miscalibrated group; only
    # the worse side is flagged by default, both sides when asked
    assert res.gap["g600"] - res.expected_gap["g600"] < 0 and not res.flagged["g600"]
    both = size_matched_flags(
        probs, labels, groups, clusters=None, n_permutations=400, seed=0, alternative="two-sided"
    )
    assert both.flagged["g300"] and both.adjusted_p["g300"] >= res.adjusted_p["g300"]


@pytest.mark.parametrize("metric", ["calibration_gap", "oe_ratio"])
def test_a_signed_metric_flags_either_side(metric: str) -> None:
    # a signed metric has no worse side: an over-confident group (calibration gap above the rest's, O:E
    # below) and an under-confident one (labels drawn at T = 1 / 1.8) are both flagged, two-sided
    rng = np.random.default_rng(5)
    groups = np.repeat(["over", "plain", "timid"], 400)
    logits = rng.normal(0.0, 1.6, size=(1200, 3))
    truth = softmax(logits)
    truth[:400] = softmax(logits[:400], temperature=1.8)
    truth[800:] = softmax(logits[800:], temperature=1 / 1.8)
    labels = (rng.uniform(size=(1200, 1)) > truth.cumsum(axis=1)).sum(axis=1)
    res = size_matched_flags(
        softmax(logits), labels, groups, clusters=None, metric=metric, n_permutations=300
    )
    assert res.alternative == "two-sided"  # whatever was asked: "worse" is the default
    assert res.flagged == {"over": True, "plain": False, "timid": True}
    sign = 1.0 if metric == "calibration_gap" else -1.0  # O:E is below 1 where over-confident
    assert sign * res.gap["over"] > 0.05 and sign * res.gap["timid"] < -0.05


def test_accuracy_is_worse_when_lower() -> None:
    probs, labels, groups = _calibrated((150, 200, 300), seed=8)
    labels = labels.copy()
    worse = np.flatnonzero(groups == "g150")[:60]  # 60 of its 150 studies get a wrong label
    labels[worse] = (probs[worse].argmax(axis=1) + 1) % 3
    res = size_matched_flags(probs, labels, groups, clusters=None, metric="accuracy", n_permutations=200)
    assert res.gap["g150"] < 0 and res.flagged["g150"]
    assert not res.flagged["g200"] and not res.flagged["g300"]


def test_the_result_does_not_depend_on_the_row_order() -> None:
    probs, labels, groups = _calibrated((60, 90), seed=4)
    patients = np.array([f"p{i // 3:03d}" for i in range(groups.shape[0])])
    a = size_matched_flags(probs, labels, groups, clusters=patients, n_permutations=50, seed=2)
    order = np.random.default_rng(0).permutation(groups.shape[0])
    b = size_matched_flags(
        probs[order], labels[order], groups[order], clusters=patients[order], n_permutations=50, seed=2
    )
    assert a.adjusted_p == pytest.approx(b.adjusted_p, abs=1e-12)
    assert a.expected_gap == pytest.approx(b.expected_gap, abs=1e-12)


def test_small_groups_are_not_judged_and_two_groups_are_needed() -> None:
    probs, labels, groups = _calibrated((10, 60, 90), seed=6)
    res = size_matched_flags(probs, labels, groups, clusters=None, min_group_size=30, n_permutations=20)
    assert res.groups == ("g60", "g90") and set(res.flagged) == {"g60", "g90"}
    with pytest.raises(DataError, match="at least two groups with at least 70 rows"):
        size_matched_flags(probs, labels, groups, clusters=None, min_group_size=70, n_permutations=20)
    with pytest.raises(DataError, match="metric with fixed bins"):
        size_matched_flags(probs, labels, groups, clusters=None, metric="ece_mass", n_permutations=20)
    with pytest.raises(DataError, match="metric with fixed bins"):
        size_matched_flags(probs, labels, groups, clusters=None, metric="smooth_ece", n_permutations=20)


def test_the_chunking_of_permutations_changes_no_number(monkeypatch: pytest.MonkeyPatch) -> None:
    import sitecal.stats._disparity_flags as flags

    probs, labels, groups = _calibrated((40, 60, 80), seed=9)
    a = size_matched_flags(probs, labels, groups, clusters=None, n_permutations=70, seed=3)
    # three permutations a chunk: each (clusters=None) takes 8 bytes per patient and a byte per row
    monkeypatch.setattr(flags, "_CHUNK_BYTES", 3 * 9 * groups.shape[0])
    b = size_matched_flags(probs, labels, groups, clusters=None, n_permutations=70, seed=3)
    assert a.adjusted_p == b.adjusted_p and a.expected_gap == pytest.approx(b.expected_gap, abs=1e-12)


def test_several_cases_share_one_draw_of_the_permutations() -> None:
    """Each case of size_matched_flags_each is what size_matched_flags gives it alone."""
    rng = np.random.default_rng(11)
    n = 900
    z = rng.normal(size=(n, 3)) * 2.0
    y = rng.integers(0, 3, n)
    groups = rng.choice(np.array(["a", "b", "c", "d"]), n)
    patients = rng.integers(0, 700, n)
    sets = [softmax(z), softmax(z / 1.6)]
    cases = [(p, m) for m in ("ece", "nll", "brier", "accuracy") for p in sets]
    together = size_matched_flags_each(
        cases, y, groups, clusters=patients, min_group_size=20, n_permutations=120, seed=5
    )
    for (p, m), flags in zip(cases, together, strict=True):
        alone = size_matched_flags(
            p, y, groups, clusters=patients, metric=m, min_group_size=20, n_permutations=120, seed=5
        )
        assert flags == alone


@pytest.mark.parametrize("workers", [1, 3])
def test_several_attributes_share_one_draw_and_layout_of_the_permutations(workers: int) -> None:
    """Each attribute's flags from size_matched_flags_attributes are what it gets alone."""
    from sitecal.stats import size_matched_flags_attributes

    rng = np.random.default_rng(12)
    n = 800
    z = rng.normal(size=(n, 3)) * 2.0
    y = rng.integers(0, 3, n)
    patients = rng.integers(0, 600, n)
    sites = rng.choice(np.array(["north", "south", "west"]), n)
    sex = rng.choice(np.array(["F", "M"]), n)
    sets = [softmax(z), softmax(z / 1.4)]
    cases = [(p, m) for m in ("ece", "nll") for p in sets]
    together = size_matched_flags_attributes(
        [(sites, cases), (sex, cases[:1])],
        y,
        clusters=patients,
        min_group_size=20,
        n_permutations=90,
        seed=4,
        workers=workers,
    )
    for groups, kept, flags in ((sites, cases, together[0]), (sex, cases[:1], together[1])):
        alone = size_matched_flags_each(
            kept, y, groups, clusters=patients, min_group_size=20, n_permutations=90, seed=4
        )
        assert flags == alone
    assert len(together[0]) == 4 and len(together[1]) == 1
