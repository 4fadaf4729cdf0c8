"""Subgroup attributes from DICOM header values: normalisation, vendors, ages, age bands, intersections.

Every value is text; an absent or empty tag is the explicit group :data:`UNKNOWN`. A value loses its
control characters here, where it enters the cohort (a NUL typed into a header never reaches an output),
and a number (an age, a value to band) is read from ASCII digits only.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import date
from itertools import pairwise
from types import MappingProxyType

from sitecal.cohort._cells import ascii_float, without_controls

__all__ = [
    "INTERSECTION_SEPARATOR",
    "UNKNOWN",
    "VENDORS",
    "age_band",
    "age_band_labels",
    "attribute_value",
    "intersection_value",
    "normalise_manufacturer",
    "normalise_text",
    "other_value",
    "parse_age_years",
    "suppress_rare_values",
]

#: The group of studies whose tag is absent or empty. It is reported like any other group.
UNKNOWN = "unknown"

#: Joins the components of an intersection value: ``"F × 40–59"``.
INTERSECTION_SEPARATOR = " × "

#: Canonical vendor → the names its ``Manufacturer`` values start with, as compared: lower case, every run
#: of punctuation and whitespace one space. A value matches the longest alias that its leading whole words
#: spell ("siemens healthcare gmbh" → "siemens"; "generic imaging" matches nothing).
VENDORS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "Siemens": ("siemens",),
        "GE": ("ge", "general electric"),
        "Philips": ("philips",),
        "Canon/Toshiba": ("canon", "toshiba"),
        "Fujifilm": ("fujifilm", "fuji"),
        "Carestream/Kodak": ("carestream", "kodak", "eastman kodak"),
        "Agfa": ("agfa",),
        "Konica Minolta": ("konica", "konica minolta"),
        "Hologic": ("hologic", "lorad"),
        "Samsung": ("samsung",),
    }
)
_VENDOR_OF_ALIAS = MappingProxyType(
    {alias: vendor for vendor, aliases in VENDORS.items() for alias in aliases}
)
_NOT_WORD = re.compile(r"[\W_]+")

# DICOM AS is nnnD|W|M|Y; the unpadded "75Y" and the bare number "65" (years) are accepted too, but not
# "75 Y", "75y" or other digits than ASCII ("٧٥Y"): a value that does not follow the form falls back to the
# dates.
_AGE = re.compile(r"^([0-9]{1,3})([DWMY])?$")
_UNIT_YEARS = {"D": 1 / 365.25, "W": 7 / 365.25, "M": 1 / 12, "Y": 1.0}
_MAX_YEARS = 130
_SEX = {"M": "M", "MALE": "M", "F": "F", "FEMALE": "F", "O": "O", "OTHER": "O"}


def normalise_text(value: str | None) -> str:
    r"""Replace control characters by spaces, trim and collapse whitespace; empty becomes :data:`UNKNOWN`.

    Examples
    --------
    >>> normalise_text("  CT\x00 01\t"), normalise_text("\x1b")
    ('CT 01', 'unknown')
    """
    if value is None:
        return UNKNOWN
    text = " ".join(without_controls(str(value)).split())
    return text or UNKNOWN


def normalise_manufacturer(value: str | None) -> str:
    """The canonical vendor of a ``Manufacturer`` value (see :data:`VENDORS`), else its normalised text.

    Examples
    --------
    >>> normalise_manufacturer("Siemens Healthcare GmbH"), normalise_manufacturer("TOSHIBA_MEC")
    ('Siemens', 'Canon/Toshiba')
    >>> normalise_manufacturer("  Acme   Imaging "), normalise_manufacturer(None)
    ('Acme Imaging', 'unknown')
    """
    words = _NOT_WORD.sub(" ", str(value or "").casefold()).split()
    if not words:
        return UNKNOWN
    for n in range(len(words), 0, -1):
        vendor = _VENDOR_OF_ALIAS.get(" ".join(words[:n]))
        if vendor is not None:
            return vendor
    return normalise_text(value)


def parse_age_years(
    age: str | None, study_date: str | None = None, birth_date: str | None = None
) -> float | None:
    """Age in years from PatientAge, else from StudyDate − PatientBirthDate.

    Parameters
    ----------
    age : str or None
        PatientAge: ``nnnD``, ``nnnW``, ``nnnM`` or ``nnnY`` (days are 1/365.25 year, weeks 7/365.25,
        months 1/12), or the unpadded ``"75Y"`` and ``"65"`` (years). Anything else (``"75 Y"``, ``"75y"``,
        ``"45.5"``) is not used.
    study_date, birth_date : str or None
        DICOM dates ``YYYYMMDD``, used when ``age`` is missing, malformed or implausible. The age is then
        the whole years completed on the study date; someone born on 29 February turns a year older on
        1 March in common years.

    Returns
    -------
    float or None
        ``None`` when neither gives a plausible age (0–130 years).

    Examples
    --------
    >>> parse_age_years("006M"), parse_age_years(None, "20200531", "19700601")
    (0.5, 49.0)
    """
    match = _AGE.match(age.strip()) if age else None
    if match:
        years = int(match.group(1)) * _UNIT_YEARS[match.group(2) or "Y"]
        if years <= _MAX_YEARS:
            return years
    if study_date and birth_date:
        try:
            studied, born = _dicom_date(study_date), _dicom_date(birth_date)
        except ValueError:
            return None
        whole = studied.year - born.year - ((studied.month, studied.day) < (born.month, born.day))
        if 0 <= whole <= _MAX_YEARS:
            return float(whole)
    return None


def _dicom_date(value: str) -> date:
    value = value.strip()
    if not re.fullmatch(r"[0-9]{8}", value):
        raise ValueError(value)
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
    """The normalised subgroup value of tag ``keyword`` for one instance's header ``values``.

    Text is trimmed with runs of whitespace collapsed; PatientSex becomes ``M``, ``F`` or ``O``;
    Manufacturer becomes its canonical vendor (:func:`normalise_manufacturer`); PatientAge becomes whole
    years, or its band among ``bands`` (falling back to StudyDate − PatientBirthDate); any other tag with
    ``bands`` is read as a number (ASCII digits only, :func:`~sitecal.cohort._cells.ascii_float`) and
    banded. Missing, empty or unusable values are :data:`UNKNOWN`.
    """
    if keyword == "PatientAge":
        years = parse_age_years(
            values.get("PatientAge"), values.get("StudyDate"), values.get("PatientBirthDate")
        )
        if bands is None:
            return UNKNOWN if years is None else str(int(years))
        return age_band(years, bands)
    if bands is not None:
        text = values.get(keyword)
        return age_band(None if text is None else ascii_float(text), bands)
    if keyword == "PatientSex":
        return _SEX.get(normalise_text(values.get(keyword)).upper(), UNKNOWN)
    if keyword == "Manufacturer":
        return normalise_manufacturer(values.get(keyword))
    return normalise_text(values.get(keyword))


def intersection_value(components: Sequence[str]) -> str:
    """The value of an intersection of subgroups: ``"F × 40–59"``; :data:`UNKNOWN` if any component is.

    Examples
    --------
    >>> intersection_value(["F", "40–59"]), intersection_value(["F", "unknown"])
    ('F × 40–59', 'unknown')
    """
    if UNKNOWN in components:
        return UNKNOWN
    return INTERSECTION_SEPARATOR.join(components)


def other_value(k: int) -> str:
    """The group that pools the values held by fewer than ``k`` studies: ``"other (n < 5)"``."""
    return f"other (n < {k})"


def suppress_rare_values(
    rows: Sequence[Mapping[str, str]], k: int, *, keep: Iterable[str] = (UNKNOWN,)
) -> list[dict[str, str]]:
    """Pool every subgroup value held by fewer than ``k`` rows as :func:`other_value`, attribute by attribute.

    A value seen in one or a few studies is as good as a name, and some are names (a StationName typed as
    ``"SMITH JOHN 55512345"``). Pooling them before anything is evaluated or written means no output can
    show them; the pooled group is evaluated and reported like any other. Apply it to the tag attributes
    before intersections are formed, then to the intersections.

    Parameters
    ----------
    rows : sequence of mapping
        One mapping per study: attribute name → value.
    k : int
        The smallest number of studies a value must have to be shown (``privacy.min_count_shown``);
        1 shows every value.
    keep : iterable of str, default (UNKNOWN,)
        Values that are never pooled however rare (they name no one): ``unknown`` and ``unmapped``.

    Returns
    -------
    list of dict
        The rows with rare values replaced, in the same order, each with the keys of its input row.

    Raises
    ------
    ValueError
        When ``k`` is not an int >= 1.

    Examples
    --------
    >>> rows = [{"site": "A"}] * 5 + [{"site": "SMITH JOHN"}, {"site": "B"}, {"site": "unknown"}]
    >>> [row["site"] for row in suppress_rare_values(rows, 5)]
    ['A', 'A', 'A', 'A', 'A', 'other (n < 5)', 'other (n < 5)', 'unknown']
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"The 'k' parameter of suppress_rare_values must be an int >= 1. Got {k!r}.")
    kept = set(keep)
    counts: Counter[tuple[str, str]] = Counter((name, value) for row in rows for name, value in row.items())
    other = other_value(k)
    return [
        {name: value if value in kept or counts[name, value] >= k else other for name, value in row.items()}
        for row in rows
    ]
