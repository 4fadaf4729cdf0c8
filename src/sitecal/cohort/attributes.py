"""Subgroup attributes from DICOM header values: normalisation, ages, age bands, explicit ``unknown``."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from datetime import date
from itertools import pairwise

__all__ = ["UNKNOWN", "age_band", "age_band_labels", "attribute_value", "parse_age_years"]

#: The group of studies whose tag is absent or empty. It is reported like any other group.
UNKNOWN = "unknown"

_AGE = re.compile(r"^\s*(\d{1,3})\s*([DWMY])?\s*$", re.IGNORECASE)
_UNIT_YEARS = {"D": 1 / 365.25, "W": 7 / 365.25, "M": 1 / 12, "Y": 1.0}
_SEX = {"M": "M", "MALE": "M", "F": "F", "FEMALE": "F", "O": "O", "OTHER": "O"}


def normalise_text(value: str | None) -> str:
    """Trim and collapse whitespace; empty becomes :data:`UNKNOWN`."""
    if value is None:
        return UNKNOWN
    text = " ".join(str(value).split())
    return text or UNKNOWN


def parse_age_years(
    age: str | None, study_date: str | None = None, birth_date: str | None = None
) -> float | None:
    """Age in years from PatientAge (``nnnD|W|M|Y``, ``"75Y"``, ``"65"``), else StudyDate − PatientBirthDate.

    Returns ``None`` when neither gives a plausible age (0–130 years).
    """
    if age:
        match = _AGE.match(age)
        if match:
            years = int(match.group(1)) * _UNIT_YEARS[(match.group(2) or "Y").upper()]
            if 0 <= years <= 130:
                return years
    if study_date and birth_date:
        try:
            studied, born = _dicom_date(study_date), _dicom_date(birth_date)
        except ValueError:
            return None
        years = (studied - born).days / 365.25
        if 0 <= years <= 130:
            return years
    return None


def _dicom_date(value: str) -> date:
    value = value.strip()
    return date(int(value[0:4]), int(value[4:6]), int(value[6:8]))


def age_band_labels(edges: Sequence[float]) -> list[str]:
    """Labels of the bands [e0, e1), [e1, e2), ...; an open last band (edge >= 120) reads ``"80+"``."""
    labels = []
    for lo, hi in pairwise(edges):
        lo_text = _years(lo)
        labels.append(f"{lo_text}+" if hi >= 120 else f"{lo_text}–{_years(math.ceil(hi) - 1)}")
    return labels


def _years(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def age_band(years: float | None, edges: Sequence[float]) -> str:
    """The band label of ``years`` among ``edges`` ([lo, hi)), or :data:`UNKNOWN` when outside or missing."""
    if years is None:
        return UNKNOWN
    labels = age_band_labels(edges)
    for label, (lo, hi) in zip(labels, pairwise(edges), strict=False):
        if lo <= years < hi:
            return label
    return UNKNOWN


def attribute_value(keyword: str, values: Mapping[str, str], bands: Sequence[float] | None = None) -> str:
    """The normalised subgroup value of tag ``keyword`` for one instance's header ``values``."""
    if keyword == "PatientAge":
        years = parse_age_years(
            values.get("PatientAge"), values.get("StudyDate"), values.get("PatientBirthDate")
        )
        if bands is None:
            return UNKNOWN if years is None else str(int(years))
        return age_band(years, bands)
    if bands is not None:
        try:
            number: float | None = float(values[keyword])
        except (KeyError, ValueError):
            number = None
        return age_band(number, bands)
    if keyword == "PatientSex":
        return _SEX.get(normalise_text(values.get(keyword)).upper(), UNKNOWN)
    return normalise_text(values.get(keyword))
