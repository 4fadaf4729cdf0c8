"""Each public package's __all__ lists exactly its public names, and the names DESIGN.md promises exist."""

from __future__ import annotations

import importlib
import inspect

import pytest

PACKAGES = [
    "sitecal",
    "sitecal.errors",
    "sitecal.metrics",
    "sitecal.calibration",
    "sitecal.stats",
    "sitecal.cohort",
    "sitecal.inference",
    "sitecal.report",
    "sitecal.protocol",
    "sitecal.results",
    "sitecal.run",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_all_matches_public_names(name: str) -> None:
    module = importlib.import_module(name)
    exported = set(module.__all__)
    assert len(exported) == len(module.__all__), "duplicates in __all__"
    for item in exported:
        assert hasattr(module, item), f"{name}.__all__ names missing {item}"
    public = {
        n
        for n, v in vars(module).items()
        if not n.startswith("_")
        and not inspect.ismodule(v)
        and (getattr(v, "__module__", "") == name or getattr(v, "__module__", "").startswith(name + "."))
        and (inspect.isclass(v) or inspect.isfunction(v))
    }
    assert public <= exported | {"annotations"}, f"{name}: public but not in __all__: {public - exported}"


def test_design_names_importable() -> None:
    from sitecal.calibration import fit_temperature
    from sitecal.metrics import expected_calibration_error
    from sitecal.stats import bootstrap_interval

    assert callable(fit_temperature) and callable(expected_calibration_error) and callable(bootstrap_interval)
    params = inspect.signature(expected_calibration_error).parameters
    assert [p for p in params if params[p].kind is inspect.Parameter.KEYWORD_ONLY][:3] == [
        "n_bins",
        "binning",
        "kind",
    ]
    assert params["n_bins"].default == 15
