"""The steps the bootstrap engines share (sitecal.stats._engine_steps)."""

from __future__ import annotations

import numpy as np
import pytest

from sitecal.errors import DataError
from sitecal.metrics import metric_statistic
from sitecal.stats import BootstrapSpec
from sitecal.stats._engine_steps import BeforeAfter, checked_spec, metric_names, resampled_values
from sitecal.stats._evaluators import EvaluatorSet, make_evaluator
from sitecal.stats._resample import draw_chunks, make_plan


def _rows(n: int = 40) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    return rng.normal(size=(n, 3)) * 2.0, rng.integers(0, 3, n)


def test_checked_spec_defaults_and_refuses_other_types() -> None:
    assert checked_spec(None, func="f") == BootstrapSpec()
    with pytest.raises(DataError, match=r"^The 'spec' parameter of f must be a BootstrapSpec\. Got int\.$"):
        checked_spec(3, func="f")  # type: ignore[arg-type]


def test_metric_names_are_registry_names_listed_once() -> None:
    assert metric_names(["ece", "nll"], func="f") == ("ece", "nll")
    with pytest.raises(DataError, match="must be a sequence of names"):
        metric_names("ece", func="f")
    with pytest.raises(DataError, match="must list each metric once"):
        metric_names(("nll", "nll"), func="f")


def test_resampled_values_are_each_evaluators_replicates_in_resample_order() -> None:
    z, y = _rows()
    probs = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    plan = make_plan(40, None, None, func="test")
    evaluators = EvaluatorSet(
        [make_evaluator(metric_statistic(m), (probs, y), plan) for m in ("nll", "brier")]
    )
    values = resampled_values(evaluators, plan, seed=5, n_resamples=11, chunk_size=4, workers=2)
    # the same draws taken one chunk of 11: the chunks are laid side by side in resample order
    whole = next(draw_chunks(plan, seed=5, n_resamples=11, chunk_size=11))
    assert values.shape == (2, 11)
    assert np.array_equal(values, evaluators.replicates(whole))


def test_before_after_at_temperature_one_repeats_before_and_does_not_depend_on_chunks() -> None:
    z, y = _rows()
    plan = make_plan(40, None, None, func="test")
    stats = [metric_statistic(m) for m in ("nll", "accuracy")]
    pairs = BeforeAfter.of(stats, z, y, plan)
    # log T = 0 calibrates nothing: "after" is "before", up to the order of the sums
    estimates = pairs.estimates(np.zeros(1))
    assert np.allclose(estimates[:, 0], estimates[:, 1], rtol=1e-12, atol=0.0)

    def replicates(chunk: int) -> np.ndarray:
        draws = draw_chunks(plan, seed=1, n_resamples=9, chunk_size=chunk)
        return pairs.replicates(((d, np.zeros(d.size)) for d in draws), 9, workers=1)

    values = replicates(2)
    assert np.allclose(values[:, 0], values[:, 1], rtol=1e-12, atol=0.0)
    assert np.array_equal(values, replicates(9))
