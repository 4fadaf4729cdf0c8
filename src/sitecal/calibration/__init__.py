"""Temperature scaling per site or scanner: fitting, the small-group policy and empirical-Bayes pooling.

Numeric only: arrays in, frozen result objects out (no files, no protocol, no torch). The deployable
PyTorch wrapper is :class:`sitecal.inference.GroupTemperatureScaler`.
"""

from __future__ import annotations

from sitecal.calibration._batched import (
    BatchedSolution,
    BatchedTemperatureSolver,
    Surrogate,
    family_surrogates,
)
from sitecal.calibration._empirical_bayes import (
    EmpiricalBayesShrinkage,
    cluster_robust_variance,
    shrink_log_temperatures,
)
from sitecal.calibration._group_methods import GroupMethodFit, GroupMethods, fit_group_methods
from sitecal.calibration._groups import (
    GroupTemperature,
    GroupTemperatures,
    cluster_codes,
    fit_group_temperatures,
)
from sitecal.calibration._methods import METHODS, FittedMethod, fit_method
from sitecal.calibration._temperature import (
    DEFAULT_BOUNDS,
    TemperatureFit,
    fit_temperature,
    fit_validated,
    temperature_bounds,
)

__all__ = [
    "DEFAULT_BOUNDS",
    "METHODS",
    "BatchedSolution",
    "BatchedTemperatureSolver",
    "EmpiricalBayesShrinkage",
    "FittedMethod",
    "GroupMethodFit",
    "GroupMethods",
    "GroupTemperature",
    "GroupTemperatures",
    "Surrogate",
    "TemperatureFit",
    "cluster_codes",
    "cluster_robust_variance",
    "family_surrogates",
    "fit_group_methods",
    "fit_group_temperatures",
    "fit_method",
    "fit_temperature",
    "fit_validated",
    "shrink_log_temperatures",
    "temperature_bounds",
]
