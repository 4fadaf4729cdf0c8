"""The planned study size of every judged group: the engine against a binomial reference, the bisection
and its early stopping against full simulation, and what the evaluation records."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError
from scipy.stats import binom

from sitecal.evaluation._study_size import (
    TARGET_POWER,
    _Simulations,
    needed_size,
    pass_rate,
    plan_study_sizes,
    pool_model,
)
from sitecal.metrics import softmax
from sitecal.protocol import AcceptanceCriterion, PlanningSettings
from sitecal.results import Criterion, CriterionResult

SIM = {"n_resamples": 200, "n_bins": 15, "level": 0.95, "seed": 7}


def _constant_confidence(top: float) -> np.ndarray:
    """Rows whose top probability is ``top`` (the rest shared): a calibrated model's accuracy is ``top``."""
    rest = (1 - top) / 2
    return np.tile([top, rest, rest], (50, 1))


def test_the_pass_rate_of_an_accuracy_criterion_agrees_with_the_binomial_reference() -> None:
    # a calibrated model with every top probability 0.8 is right with chance 0.8; "accuracy above 0.7"
    # passes when the interval's lower end clears 0.7; with the normal approximation of the percentile
    # interval that is p_hat - 1.96 sqrt(p_hat (1 - p_hat) / n) > 0.7
    criterion = AcceptanceCriterion(id="acc", metric="accuracy", above=0.7)
    model = pool_model(_constant_confidence(0.8), "constant")
    n = 100
    k = np.arange(n + 1)
    p_hat = k / n
    clears = p_hat - 1.959964 * np.sqrt(p_hat * (1 - p_hat) / n) > 0.7
    reference = float(binom.pmf(k, n, 0.8)[clears].sum())  # 0.65 here
    simulated = pass_rate(criterion, model, n, n_simulations=400, **SIM)
    # 400 simulations: standard error about 0.023, and the 200-resample percentile ends are noisy
    assert simulated == pytest.approx(reference, abs=0.08)
    assert 0.6 < reference < 0.8  # the case is one where the size matters


def test_early_stopping_decides_as_the_full_simulation_and_bisection_finds_the_smallest_size() -> None:
    criterion = AcceptanceCriterion(id="ece", metric="ece_debiased", below=0.10)
    probs = softmax(np.random.default_rng(3).normal(size=(60, 3)) * 1.5)
    model = pool_model(probs, "drawn")
    sizes = [100, 200, 300, 400, 600, 800]
    full = {n: pass_rate(criterion, model, n, n_simulations=60, **SIM) for n in sizes}
    for n in sizes:
        early = _Simulations(criterion, model, n, n_simulations=60, **SIM)
        assert early.reaches(TARGET_POWER) == (full[n] >= TARGET_POWER), n
        assert early.rate() == full[n]  # going on after an early stop gives the full run's rate
    reaching = [n for n in sizes if full[n] >= TARGET_POWER]
    assert reaching and reaching[0] > sizes[0]  # the case is not trivial: some sizes fall short
    assert reaching == sizes[sizes.index(reaching[0]) :]  # every larger size reaches it too
    need = needed_size(criterion, model, sizes, n_simulations=60, **SIM)
    assert need.needed == reaching[0]
    assert need.pass_rate == full[reaching[0]]
    assert len(need.rates) < len(sizes)  # the bisection simulated fewer sizes in full


def test_no_size_reaches_a_margin_the_calibrated_model_cannot_clear() -> None:
    # accuracy of a calibrated model with top probability 0.7 is 0.7: "above 0.72" never passes
    criterion = AcceptanceCriterion(id="acc", metric="accuracy", above=0.72)
    need = needed_size(
        criterion, pool_model(_constant_confidence(0.7), "c"), [50, 400], n_simulations=40, **SIM
    )
    assert need.needed is None and need.pass_rate < 0.1
    assert set(need.rates) == {400}


def test_the_pool_is_drawn_the_same_whatever_the_row_order() -> None:
    probs = softmax(np.random.default_rng(0).normal(size=(40, 3)))
    shuffled = probs[np.random.default_rng(1).permutation(40)]
    # last-bit noise, as a sum taken in another order leaves it
    shuffled = shuffled * (1 + 1e-15)
    a = pool_model(probs, "a").draw(200, np.random.default_rng(5))
    b = pool_model(shuffled, "b").draw(200, np.random.default_rng(5))
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def _criterion(results: tuple[CriterionResult, ...]) -> Criterion:
    return Criterion(
        id="acc",
        description=None,
        metric="accuracy",
        stage="after",
        rule="above",
        lower_margin=0.7,
        upper_margin=None,
        level=0.95,
        scope="scanner",
        results=results,
        verdict="inconclusive",
    )


def test_every_judged_group_gets_a_size_and_the_document_says_how() -> None:
    rule = AcceptanceCriterion(id="acc", metric="accuracy", above=0.7, scope="scanner")
    rows = tuple(
        CriterionResult(group=g, n=n, estimate=0.8, low=0.65, high=0.9, verdict=v)
        for g, n, v in (("A", 50, "inconclusive"), ("B", 50, "pass"), ("C", 5, "insufficient data"))
    )
    scanners = np.repeat(["A", "B", "C"], 50)
    after = np.vstack([_constant_confidence(0.95), _constant_confidence(0.8), _constant_confidence(0.8)])
    settings = PlanningSettings(simulations=40, sizes=[50, 100, 200, 400])
    planned, how = plan_study_sizes(
        [_criterion(rows)],
        [rule],
        {"before": after, "after": after},
        {"scanner": scanners},
        settings=settings,
        n_bins=15,
        seed=7,
    )
    a, b, c = planned[0].results
    assert a.study_size is not None and b.study_size is not None and c.study_size is None
    assert a.study_size.needed is not None and b.study_size.needed is not None
    # the group whose model is right 95% of the time clears 0.7 with fewer studies than the 80% one
    assert a.study_size.needed < b.study_size.needed
    assert a.study_size.pass_rate >= TARGET_POWER
    assert how is not None and how.sizes == (50, 100, 200, 400) and how.n_simulations == 40
    assert how.target_power == TARGET_POWER and how.seed == 7
    # the document's row says so
    assert planned[0].to_dict()["results"][0]["study_size"] == {
        "needed": a.study_size.needed,
        "pass_rate": a.study_size.pass_rate,
    }
    assert "study_size" not in planned[0].to_dict()["results"][2]
    off, none = plan_study_sizes(
        [_criterion(rows)],
        [rule],
        {"before": after, "after": after},
        {"scanner": scanners},
        settings=PlanningSettings(simulations=0),
        n_bins=15,
        seed=7,
    )
    assert none is None and off[0].results == rows


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"simulations": 5}, "give 0 (no study-size column) or at least 20"),
        ({"simulations": 10**6}, "must be at most 5000"),
        ({"sizes": [5, 100]}, "each size must lie between 10 and 100000 studies. Got [5]"),
        ({"sizes": []}, "at least 1 item"),
        ({"resamples": 10}, "greater than or equal to 50"),
    ],
)
def test_planning_settings_refuse_what_cannot_plan(given: dict, said: str) -> None:
    with pytest.raises(ValidationError, match=None) as caught:
        PlanningSettings(**given)
    assert said in str(caught.value)


def test_planning_sizes_are_sorted_and_unique() -> None:
    assert PlanningSettings(sizes=[400, 100, 400]).sizes == [100, 400]
