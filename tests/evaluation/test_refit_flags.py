"""Under one split with every group's own temperature, the calibration attribute's after-calibration flags
refit the temperatures in every permutation (sitecal.stats.refit_size_matched_flags); otherwise not."""

from __future__ import annotations

from typing import Any

import pytest
from tests.results import synthetic

from sitecal.evaluation import evaluate
from sitecal.evaluation._groups import patient_codes
from sitecal.metrics import softmax
from sitecal.stats import refit_size_matched_flags, size_matched_flags


def _outcome(min_group_size: int) -> Any:
    protocol = synthetic.protocol("per-scanner-refit")
    protocol = protocol.model_copy(
        update={"calibration": protocol.calibration.model_copy(update={"min_group_size": min_group_size})}
    )
    data = synthetic.data()
    return protocol, data, evaluate(protocol, data, cohort_flow=synthetic.FLOW, protocol_sha256="0" * 64)


def _stored(outcome: Any, stage: str) -> dict[str, Any]:
    return dict(outcome.document["disparities"]["scanner"]["ece"][stage])


def test_after_flags_of_the_calibration_attribute_refit_every_temperature() -> None:
    protocol, data, outcome = _outcome(10)
    assert {entry.source for entry in outcome.temperatures.groups.values()} == {"own"}
    fit = outcome.fit_mask
    held = ~fit
    patients = patient_codes(data.patient_keys)
    ev, boot = protocol.evaluation, protocol.evaluation.bootstrap
    scanner = data.attributes["scanner"]
    common = {
        "metrics": ["ece"],
        "n_bins": ev.n_bins,
        "min_group_size": ev.min_group_size,
        "n_permutations": boot.n_resamples,
        "level": boot.level,
        "seed": boot.seed,
    }
    refitted = refit_size_matched_flags(
        data.logits[held],
        data.labels[held],
        scanner[held],
        clusters=patients[held],
        fit_logits=data.logits[fit],
        fit_labels=data.labels[fit],
        fit_groups=scanner[fit],
        fit_clusters=patients[fit],
        **common,
    )[0]
    after = _stored(outcome, "after")
    assert after["adjusted_p"] == pytest.approx(dict(refitted.adjusted_p), abs=1e-12)
    assert after["expected_gap"] == pytest.approx(dict(refitted.expected_gap), abs=1e-12)
    # the before flags are the plain size-matched ones (no temperature to refit)
    plain = size_matched_flags(
        softmax(data.logits[held]),
        data.labels[held],
        scanner[held],
        clusters=patients[held],
        metric="ece",
        n_bins=ev.n_bins,
        min_group_size=ev.min_group_size,
        n_permutations=boot.n_resamples,
        level=boot.level,
        seed=boot.seed,
    )
    assert _stored(outcome, "before")["adjusted_p"] == pytest.approx(dict(plain.adjusted_p), abs=1e-12)


def test_a_group_on_the_global_temperature_keeps_the_plain_flags() -> None:
    _, _, outcome = _outcome(30)  # scanner C has too few fit studies: it takes the global temperature
    assert "global_fallback" in {entry.source for entry in outcome.temperatures.groups.values()}
    _, _, refit = _outcome(10)
    assert _stored(outcome, "after")["adjusted_p"] != _stored(refit, "after")["adjusted_p"]
