from __future__ import annotations

import re

import pytest

from sitecal.errors import DataError
from sitecal.stats import BootstrapSpec


def test_defaults_and_round_trip() -> None:
    spec = BootstrapSpec()
    assert (spec.n_resamples, spec.level, spec.method, spec.seed, spec.chunk_size) == (
        1000,
        0.95,
        "percentile",
        0,
        None,
    )
    assert BootstrapSpec.from_dict(spec.to_dict()) == spec
    assert BootstrapSpec(method="BCa").method == "bca"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_resamples": 1}, "The 'n_resamples' parameter of BootstrapSpec must be an int >= 2. Got 1."),
        ({"level": 1.0}, "The 'level' parameter of BootstrapSpec must be a float in (0, 1). Got 1.0."),
        ({"seed": -1}, "The 'seed' parameter of BootstrapSpec must be an int >= 0. Got -1."),
        ({"chunk_size": 0}, "The 'chunk_size' parameter of BootstrapSpec must be an int >= 1. Got 0."),
        ({"method": "percentil"}, "Got 'percentil'. Did you mean 'percentile'?"),
    ],
)
def test_validation(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(DataError, match=re.escape(message)):
        BootstrapSpec(**kwargs)  # type: ignore[arg-type]
