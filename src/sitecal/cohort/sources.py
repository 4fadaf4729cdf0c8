"""Where the analysed studies came from: sites, scanners, modalities and study months, from the headers.

The report's Data section states its sources at the precision a governance file needs and no finer: the
study date is kept as its month (``2025-03``), never the day. Sites are InstitutionName and scanners
Manufacturer + ManufacturerModelName, normalised as subgroup values are
(:func:`sitecal.cohort.attributes.attribute_value`); a missing value is ``unknown``, counted like any other.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from sitecal.cohort.attributes import UNKNOWN, attribute_value, suppress_rare_values

__all__ = ["SOURCE_KEYWORDS", "source_values", "summarise_sources"]

SOURCE_KEYWORDS = ("InstitutionName", "Manufacturer", "ManufacturerModelName", "Modality", "StudyDate")
"""Header fields the sources are read from (the scan keeps them for every instance)."""

_DATE = re.compile(r"\s*([0-9]{4})([0-9]{2})[0-9]{2}\s*$")  # ASCII digits only


def study_month(value: str | None) -> str:
    """``YYYY-MM`` of a DICOM DA value (``20250314`` → ``2025-03``); :data:`UNKNOWN` when it is not a date.

    Examples
    --------
    >>> study_month("20250314"), study_month("2025"), study_month(None)
    ('2025-03', 'unknown', 'unknown')
    """
    match = _DATE.match(value or "")
    if not match or not 1 <= int(match.group(2)) <= 12:
        return UNKNOWN
    return f"{match.group(1)}-{match.group(2)}"


def source_values(values: Mapping[str, str]) -> dict[str, str]:
    """The source facts of one study from its (first) instance's header values."""
    manufacturer = attribute_value("Manufacturer", values)
    model = attribute_value("ManufacturerModelName", values)
    if manufacturer == UNKNOWN and model == UNKNOWN:
        scanner = UNKNOWN
    elif model == UNKNOWN or model.lower().startswith(manufacturer.lower()):
        scanner = manufacturer if model == UNKNOWN else model
    else:
        scanner = f"{manufacturer} {model}" if manufacturer != UNKNOWN else model
    return {
        "site": attribute_value("InstitutionName", values),
        "scanner": scanner,
        "modality": attribute_value("Modality", values),
        "month": study_month(values.get("StudyDate")),
    }


def _counts(values: Iterable[str]) -> list[dict[str, Any]]:
    """Value counts, most frequent first, then by value; ``unknown`` last."""
    counted = Counter(values)
    order = sorted(counted, key=lambda v: (v == UNKNOWN, -counted[v], v))
    return [{"value": v, "count": counted[v]} for v in order]


def summarise_sources(sources: Iterable[Mapping[str, str]], *, min_count_shown: int = 1) -> dict[str, Any]:
    """Counts of sites, scanners and modalities, and the first and last study month, over studies.

    A site, scanner or modality of fewer than ``min_count_shown`` studies is counted as ``other (n < k)``
    (:func:`sitecal.cohort.attributes.suppress_rare_values`): a header typed with a person's name on one
    study is as good as the name.

    Returns
    -------
    dict
        ``sites``, ``scanners``, ``modalities``: lists of ``{"value", "count"}``; ``months``:
        ``{"first", "last", "unknown"}`` (first and last ``None`` when no study has a usable date).
    """
    rows = list(sources)
    shown = ("site", "scanner", "modality")
    pooled = suppress_rare_values([{k: r[k] for k in shown} for r in rows], min_count_shown)
    rows = [{**r, **p} for r, p in zip(rows, pooled, strict=True)]
    months = sorted(r["month"] for r in rows if r["month"] != UNKNOWN)
    return {
        "sites": _counts(r["site"] for r in rows),
        "scanners": _counts(r["scanner"] for r in rows),
        "modalities": _counts(r["modality"] for r in rows),
        "months": {
            "first": months[0] if months else None,
            "last": months[-1] if months else None,
            "unknown": sum(r["month"] == UNKNOWN for r in rows),
        },
    }
