"""``calibration.json``: the fitted temperatures, as deployment loads them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Annotated, ClassVar, Literal

from sitecal.results._codec import Record
from sitecal.results._fields import JSON, Constraint, OrAbsent
from sitecal.results._kinds import Count, Positive, Sha256

__all__ = [
    "CalibrationDocument",
    "GroupTemperatureRecord",
    "MethodCalibrationDocument",
    "TemperatureFitRecord",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class TemperatureFitRecord(Record):
    """One temperature fit, as ``sitecal.calibration.TemperatureFit.to_dict`` writes it.

    Attributes
    ----------
    temperature : float
        Fitted T = exp(log_temperature); logits are divided by it.
    log_temperature : float
        s = log T, the variable optimised.
    n : int
        Rows used.
    nll_before : float
        Mean NLL (nats) at T = 1.
    nll_after : float
        Mean NLL at the fitted T.
    iterations : int
        Newton or bisection steps taken.
    gradient : float
        Derivative of the objective with respect to log T at the result.
    converged : bool
        Whether the minimiser was located to the tolerance inside the bounds.
    note : str
        "" or which bound was hit and why, one class only, shrinkage used.
    """

    temperature: Positive
    log_temperature: float
    n: Count
    nll_before: float
    nll_after: float
    iterations: Count
    gradient: float
    converged: bool
    note: str


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupTemperatureRecord(Record):
    """The temperature used for one group, as ``sitecal.calibration.GroupTemperature.to_dict`` writes it.

    Attributes
    ----------
    n : int
        Rows of this group at fitting time.
    source : {"own", "global_fallback", "shrunk", "empirical_bayes"}
        'own': fitted on the group alone; 'global_fallback': too small, takes the global T (no fit);
        'shrunk': too small, fitted with a penalty pulling log T toward the global log T;
        'empirical_bayes': the group's own fit shrunk toward the REML mean log T of all groups.
    fit : TemperatureFitRecord or None
        The group's own or penalised fit (for 'empirical_bayes': its own, unshrunk fit).
    weight : float, optional
        'empirical_bayes' only: w = tau2 / (tau2 + variance) in [0, 1]; log T = mean_log_temperature +
        weight (fit.log_temperature - mean_log_temperature).
    variance : float, optional
        'empirical_bayes' only: the patient-cluster-robust variance of the own fit's log T; absent when
        infinite (a fit on a bound of T, zero curvature or one patient: weight 0).
    """

    group: str
    temperature: Positive
    n: Count
    source: Literal["own", "global_fallback", "shrunk", "empirical_bayes"]
    fit: TemperatureFitRecord | None
    weight: OrAbsent[Annotated[float, Constraint(minimum=0, maximum=1)]] = None
    variance: OrAbsent[Annotated[float, Constraint(exclusive_minimum=0)]] = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CalibrationDocument(Record):
    """``calibration.json``: temperature per group plus the global fit; what deployment loads.

    The keys from ``format`` on are ``sitecal.calibration.GroupTemperatures.to_dict()``, so that
    ``GroupTemperatures.from_dict`` reads the file as it is.

    Attributes
    ----------
    method : {"temperature"}
        The recalibration method.
    per : str or None
        Subgroup with one temperature per group; null: one global temperature.
    class_names : tuple of str
        The model's classes, in logit order.
    model_sha256 : str or None
        SHA-256 of the model file the temperatures apply to; null when the model was not run here and no
        model file was named (its outputs came from a predictions file).
    format, version
        The ``GroupTemperatures`` format and its version.
    min_group_size : int
        Groups with at least this many fit rows got their own fit (not used by 'empirical_bayes').
    fallback : {"global", "shrink", "empirical_bayes"}
        Policy for the smaller groups ('empirical_bayes': for every group).
    global_fit : TemperatureFitRecord
        Fit on all fit rows; serves small groups (fallback 'global') and groups unseen at fitting time.
    groups : Mapping of str to GroupTemperatureRecord
        One entry per group seen at fitting time.
    mean_log_temperature : float, optional
        'empirical_bayes' with two or more pooled groups: REML estimate of the mean log T across groups.
    tau2 : float, optional
        'empirical_bayes' with two or more pooled groups: REML estimate of the between-group variance of
        log T.
    """

    SCHEMA_VERSION: ClassVar[int] = 1
    FILE_NAME: ClassVar[str] = "calibration.json"
    HINT: ClassVar[str] = (
        "calibration.json is written by `sitecal run PROTOCOL`: write it again, or restore the unedited file"
    )

    method: Literal["temperature"]
    per: str | None
    class_names: Annotated[tuple[str, ...], Constraint(min_items=2)]
    model_sha256: Sha256 | None
    format: Literal["sitecal.calibration.GroupTemperatures"]
    version: Literal[1]
    min_group_size: Annotated[int, Constraint(minimum=1)]
    fallback: Literal["global", "shrink", "empirical_bayes"]
    global_fit: TemperatureFitRecord
    groups: Mapping[str, GroupTemperatureRecord]
    mean_log_temperature: OrAbsent[float] = None
    tau2: OrAbsent[Annotated[float, Constraint(minimum=0)]] = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MethodCalibrationDocument(Record):
    """``calibration.json`` under another method than temperature scaling: its fit per group, as deployed.

    Attributes
    ----------
    method : {"vector", "matrix", "dirichlet", "histogram", "isotonic", "beta"}
        The recalibration method (calibration.method).
    per : str or None
        Subgroup with one fit per group; null: one global fit.
    class_names : tuple of str
        The model's classes, in logit order.
    model_sha256 : str or None
        SHA-256 of the model file the calibration applies to; null when the scores came from a file.
    fits : JSON
        ``sitecal.calibration.GroupMethods.to_dict()``: the global fit (for groups below
        ``min_group_size`` and groups unseen at fitting time) and each group's own fit, read back with
        ``GroupMethods.from_dict``.
    """

    SCHEMA_VERSION: ClassVar[int] = 1
    FILE_NAME: ClassVar[str] = "calibration.json"
    HINT: ClassVar[str] = CalibrationDocument.HINT

    method: Literal["vector", "matrix", "dirichlet", "histogram", "isotonic", "beta"]
    per: str | None
    class_names: Annotated[tuple[str, ...], Constraint(min_items=2)]
    model_sha256: Sha256 | None
    fits: JSON

    def _problems(self) -> Iterator[tuple[str, str]]:
        fits = self.fits
        if not isinstance(fits, dict) or fits.get("format") != "sitecal.group_methods":
            yield ".fits", "expected GroupMethods.to_dict() (format 'sitecal.group_methods')"
        elif fits.get("name") != self.method:
            yield ".fits.name", f"expected the document's method {self.method!r}, got {fits.get('name')!r}"
