from __future__ import annotations

import json
import re

import numpy as np
import pytest

from sitecal.calibration import GroupTemperatures, fit_group_temperatures, fit_temperature
from sitecal.errors import DataError


def _sites(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Three sites with different over-confidence (scales 2, 4, 8) and a small fourth site."""
    rng = np.random.default_rng(seed)
    parts = []
    for site, scale, n in (("A", 2.0, 400), ("B", 4.0, 300), ("C", 8.0, 200), ("D", 8.0, 20)):
        y = rng.integers(0, 3, n)
        z = rng.normal(size=(n, 3))
        z[np.arange(n), y] += 1.0
        parts.append((scale * z, y, np.full(n, site)))
    return tuple(np.concatenate(p) for p in zip(*parts, strict=True))  # type: ignore[return-value]


def test_own_fits_equal_single_fits_and_small_group_falls_back() -> None:
    logits, labels, sites = _sites()
    temps = fit_group_temperatures(logits, labels, sites, min_group_size=50)
    assert temps.global_fit == fit_temperature(logits, labels)
    for site in "ABC":
        rows = sites == site
        entry = temps.groups[site]
        assert entry.source == "own" and entry.n == rows.sum()
        assert entry.fit == fit_temperature(logits[rows], labels[rows])
    small = temps.groups["D"]
    assert small.source == "global_fallback" and small.fit is None and small.n == 20
    assert small.temperature == temps.global_fit.temperature
    assert temps.groups["A"].temperature < temps.groups["B"].temperature < temps.groups["C"].temperature


def test_shrink_lies_between_global_and_own() -> None:
    logits, labels, sites = _sites()
    temps = fit_group_temperatures(logits, labels, sites, min_group_size=50, fallback="shrink")
    small = temps.groups["D"]
    assert small.source == "shrunk" and small.fit is not None
    rows = sites == "D"
    own = fit_temperature(logits[rows], labels[rows]).log_temperature
    glob = temps.global_fit.log_temperature
    s = small.fit.log_temperature
    assert min(own, glob) < s < max(own, glob)
    assert "penalty weight" in small.fit.note and small.fit.converged
    # larger prior strength -> closer to the global value
    stronger = fit_group_temperatures(logits, labels, sites, min_group_size=200, fallback="shrink")
    assert stronger.groups["D"].fit is not None
    assert abs(stronger.groups["D"].fit.log_temperature - glob) < abs(s - glob)


def test_temperatures_for_and_unseen_groups() -> None:
    logits, labels, sites = _sites()
    temps = fit_group_temperatures(logits, labels, sites)
    t = temps.temperatures_for(np.array(["C", "unknown", "A", "C"]))
    assert t.tolist() == [
        temps.groups["C"].temperature,
        temps.global_fit.temperature,
        temps.groups["A"].temperature,
        temps.groups["C"].temperature,
    ]
    assert temps.temperature_for("elsewhere") == temps.global_temperature


def test_json_round_trip_is_exact() -> None:
    logits, labels, sites = _sites()
    temps = fit_group_temperatures(logits, labels, sites, fallback="shrink")
    text = json.dumps(temps.to_dict())
    back = GroupTemperatures.from_dict(json.loads(text))
    assert back == temps
    for name, entry in temps.groups.items():
        assert back.groups[name].temperature.hex() == entry.temperature.hex()
    assert back.global_fit.log_temperature.hex() == temps.global_fit.log_temperature.hex()
    with pytest.raises(TypeError):
        temps.groups["A"] = temps.groups["B"]  # type: ignore[index]


def test_from_dict_rejects_other_formats() -> None:
    with pytest.raises(DataError, match=re.escape("GroupTemperatures.from_dict expects format")):
        GroupTemperatures.from_dict({"format": "something else"})


def test_errors() -> None:
    logits, labels, sites = _sites()
    with pytest.raises(
        DataError,
        match=re.escape(
            "The 'fallback' parameter of fit_group_temperatures must be one of 'global', 'shrink', "
            "'empirical_bayes'. Got 'shrnk'. Did you mean 'shrink'?"
        ),
    ):
        fit_group_temperatures(logits, labels, sites, fallback="shrnk")  # type: ignore[arg-type]
    with pytest.raises(
        DataError,
        match=re.escape("The 'groups' parameter of fit_group_temperatures must have shape (920,), one group"),
    ):
        fit_group_temperatures(logits, labels, sites[:-1])
    with pytest.raises(DataError, match=re.escape("must hold str group names. Got 3 at index 1")):
        fit_group_temperatures(logits[:3], labels[:3], np.array(["a", 3, "b"], dtype=object))
    with pytest.raises(
        DataError,
        match=re.escape("The 'min_group_size' parameter of fit_group_temperatures must be an int >= 1"),
    ):
        fit_group_temperatures(logits, labels, sites, min_group_size=0)
