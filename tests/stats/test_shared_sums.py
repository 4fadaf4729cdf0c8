"""SharedSums: several sum statistics through one pass over the draws, bit for bit their own replicates."""

from __future__ import annotations

import numpy as np
import pytest

from sitecal.metrics import metric_statistic
from sitecal.metrics._softmax import _softmax
from sitecal.stats._evaluators import SharedSums, make_evaluator
from sitecal.stats._resample import Draws, draw_chunks, make_plan


@pytest.mark.parametrize("patients_per_row", [1.0, 0.6])
def test_shared_sums_equal_each_evaluators_replicates(patients_per_row: float) -> None:
    rng = np.random.default_rng(4)
    n = 700
    z = rng.normal(size=(n, 3)) * 2.0
    y = rng.integers(0, 3, n)
    patients = rng.integers(0, int(n * patients_per_row), n)
    strata = patients % 3
    plan = make_plan(n, patients, strata, func="test")
    sets = [_softmax(z), _softmax(z / 1.7)]
    metrics = ["ece", "ece_debiased", "nll", "brier", "accuracy", "mce", "classwise_ece"]
    evaluators = [make_evaluator(metric_statistic(m, n_bins=15), (p, y), plan) for m in metrics for p in sets]
    shared = SharedSums(evaluators)
    everyone = Draws(np.arange(plan.n_clusters, dtype=np.int64)[None, :], plan.n_clusters)
    for evaluator, at_total in zip(evaluators, shared.replicates(everyone), strict=True):
        assert float(at_total[0]) == evaluator.estimate()  # bootstrap_metrics' estimates come this way
    for draws in draw_chunks(plan, seed=3, n_resamples=43, chunk_size=7):  # the last chunk: one resample
        together = shared.replicates(draws)
        for evaluator, values in zip(evaluators, together, strict=True):
            assert np.array_equal(values, evaluator.replicates(draws))


def test_shared_sums_refuse_a_row_weight_statistic() -> None:
    plan = make_plan(10, None, None, func="test")
    p = _softmax(np.random.default_rng(0).normal(size=(10, 2)))
    evaluator = make_evaluator(metric_statistic("ece_mass", n_bins=5), (p, np.zeros(10, dtype=int)), plan)
    with pytest.raises(TypeError, match="sum evaluators only"):
        SharedSums([evaluator])
