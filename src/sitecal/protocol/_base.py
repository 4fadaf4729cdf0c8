"""Shared pieces of the protocol schema: the strict base model and cross-field reference checks."""

from __future__ import annotations

import difflib
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

MetricName = Literal["ece", "nll", "brier", "accuracy"]
_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
_IDENTIFYING_TAGS = frozenset(
    {
        "PatientID",
        "PatientName",
        "PatientBirthDate",
        "AccessionNumber",
        "OtherPatientIDs",
        "PatientAddress",
        "ReferringPhysicianName",
        "PatientTelephoneNumbers",
        "IssuerOfPatientID",
        "MedicalRecordLocator",
    }
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)


class _ReferenceError(ValueError):
    """A cross-field reference failed; carries the location of the offending field."""

    def __init__(self, loc: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.loc = loc


def _check_reference(value: str | None, allowed: list[str], *loc: str | int) -> None:
    if value is not None and value not in allowed:
        guess = _spelling_guess(value, allowed)
        raise _ReferenceError(loc, f"'{value}' is not a subgroup defined under 'subgroups' {allowed}.{guess}")


def _spelling_guess(value: str, options: Any) -> str:
    close = difflib.get_close_matches(value, list(options), n=1, cutoff=0.6)
    return f" Did you mean '{close[0]}'?" if close else ""
