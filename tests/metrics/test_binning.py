"""The bin-edge convention, pinned: bins are (lo, hi], a value of 0 is in the first bin."""

from __future__ import annotations

import numpy as np
import pytest

from sitecal.metrics import expected_calibration_error, reliability_curve
from sitecal.metrics._binning import assign_bins, bin_edges, mass_edge_positions

EDGES15 = np.linspace(0.0, 1.0, 16)


def test_width_edges_are_linspace() -> None:
    assert np.array_equal(bin_edges(np.empty(0), 15, "width"), EDGES15)


def test_value_on_an_edge_goes_to_the_bin_on_its_left() -> None:
    # edge k closes bin k - 1; 0 opens bin 0; 1 closes the last bin
    values = np.concatenate([[0.0], EDGES15[1:]])
    expected = np.concatenate([[0], np.arange(15)])
    assert assign_bins(values, EDGES15).tolist() == expected.tolist()


def test_value_just_above_an_edge_goes_to_the_next_bin() -> None:
    values = np.nextafter(EDGES15[1:-1], 2.0)
    assert assign_bins(values, EDGES15).tolist() == list(range(1, 15))


def test_reliability_curve_puts_confidences_on_edges_left() -> None:
    # top-label confidences exactly on the edges 8/15 .. 15/15 (all >= 0.5 so they are the max)
    edges = EDGES15[8:]
    probs = np.stack([1.0 - edges, edges], axis=1)
    curve = reliability_curve(probs, np.ones(len(edges), dtype=int))
    assert curve.count.tolist() == [0] * 7 + [1] * 8  # bins 7 .. 14, one each
    assert np.allclose(curve.confidence[7:], edges)


def test_ece_distinguishes_left_closed_from_right_closed() -> None:
    # n_bins=5 (edges 0.2 apart): confidence 0.7 (wrong) and exactly the edge 0.8 (correct).
    # Ours, (lo, hi]: both in (0.6, 0.8]: |(0 + 1) - (0.7 + 0.8)| / 2 = 0.25.
    # [lo, hi) would split them: (|0 - 0.7| + |1 - 0.8|) / 2 = 0.45.
    edge = np.linspace(0.0, 1.0, 6)[4]  # the float 0.8 that is the edge
    probs = np.array([[0.3, 0.7], [1.0 - edge, edge]])
    assert expected_calibration_error(probs, [0, 1], n_bins=5) == pytest.approx(0.25, abs=1e-12)


def test_zero_and_one_in_classwise_bins() -> None:
    # one-hot probabilities that are right: every column value is exactly 0 or 1 -> perfectly calibrated
    probs = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    assert expected_calibration_error(probs, [0, 1, 0], kind="classwise") == 0.0
    # and wrong ones: class-wise ECE = mean over classes of (1/N) sum |1[y=k] - p_k| = 1
    assert expected_calibration_error(probs, [1, 0, 1], kind="classwise") == 1.0


def test_mass_edges_inverted_cdf_and_ties() -> None:
    # N = 6, B = 3: inner edges are the ceil(6k/3) = 2nd and 4th smallest values
    assert mass_edge_positions(6, 3).tolist() == [1, 3]
    values = np.array([0.6, 0.1, 0.3, 0.2, 0.5, 0.4])
    assert bin_edges(values, 3, "mass").tolist() == [0.0, 0.2, 0.4, 1.0]
    assert np.bincount(assign_bins(values, bin_edges(values, 3, "mass"))).tolist() == [2, 2, 2]
    # ties are never split: four copies of 0.5 all go to the bin whose upper edge is 0.5
    tied = np.array([0.5, 0.5, 0.5, 0.5, 0.9, 0.95])
    edges = bin_edges(tied, 3, "mass")
    assert edges.tolist() == [0.0, 0.5, 0.5, 1.0]
    assert np.bincount(assign_bins(tied, edges), minlength=3).tolist() == [4, 0, 2]
