"""Instances → studies: one image per study, or one series per study (a volume), chosen by stated rules."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from sitecal.cohort.scan import InstanceHeader
from sitecal.protocol import SeriesRules

__all__ = [
    "SELECTION_RULE",
    "SERIES_TIE_BREAK",
    "SeriesChoice",
    "describe_selection",
    "group_by_study",
    "select_series",
    "slice_count",
]

#: How the image of a study with several instances is chosen (stated in the report).
SELECTION_RULE = "lowest InstanceNumber, then lowest SOPInstanceUID"
#: How one series is chosen among the qualifying series of a study (stated in the report).
SERIES_TIE_BREAK = (
    "most slices, then lowest SeriesNumber, then lowest SeriesInstanceUID (compared as numbers, part by part)"
)


def _order(instance: InstanceHeader) -> tuple[bool, int, str]:
    # a single-frame image before a multi-frame one (a cine loop, often in a codec the reader lacks), then
    # the lowest InstanceNumber, then the lowest SOPInstanceUID
    frames = _integer(instance.values.get("NumberOfFrames"), 1)
    return frames > 1, _integer(instance.values.get("InstanceNumber"), 2**31), instance.sop_instance_uid


def _integer(text: str | None, default: int) -> int:
    try:
        return int(float(text)) if text else default
    except ValueError:
        return default


def group_by_study(
    instances: Sequence[InstanceHeader],
) -> list[tuple[InstanceHeader, tuple[InstanceHeader, ...]]]:
    """Group instances by StudyInstanceUID and pick one per study.

    The pick: a single-frame image before a multi-frame one, then the lowest InstanceNumber, then the
    lowest SOPInstanceUID.

    Returns
    -------
    list of (chosen, others)
        One entry per study, in order of StudyInstanceUID; ``others`` are the instances not analysed.
    """
    grouped = []
    for members in _by_study(instances).values():
        ordered = sorted(members, key=_order)
        grouped.append((ordered[0], tuple(ordered[1:])))
    return grouped


@dataclass(frozen=True)
class SeriesChoice:
    """The series chosen for one study (``None`` when none qualifies) and why each other one was not.

    ``chosen`` holds the series' instances in scan order (by path; the reader orders the slices);
    ``passed_over`` pairs each other series' instances with the reason it was not analysed.
    """

    study_instance_uid: str
    chosen: tuple[InstanceHeader, ...] | None
    passed_over: tuple[tuple[tuple[InstanceHeader, ...], str], ...]


def select_series(instances: Sequence[InstanceHeader], rules: SeriesRules) -> list[SeriesChoice]:
    """Group instances into studies and series, and choose one qualifying series per study.

    A series is the instances sharing a SeriesInstanceUID (instances without one are a series of their
    own each). Its first instance by path is judged against ``rules``; among the series that qualify,
    :data:`SERIES_TIE_BREAK` decides.

    Returns
    -------
    list of SeriesChoice
        One per study, in order of StudyInstanceUID.
    """
    pattern = re.compile(rules.series_description) if rules.series_description is not None else None
    choices = []
    for study_uid, members in _by_study(instances).items():
        series: dict[str, list[InstanceHeader]] = defaultdict(list)
        for instance in sorted(members, key=lambda i: i.path):
            series[instance.values.get("SeriesInstanceUID") or "sop:" + instance.sop_instance_uid].append(
                instance
            )
        qualifying: list[tuple[InstanceHeader, ...]] = []
        passed_over: list[tuple[tuple[InstanceHeader, ...], str]] = []
        for group in series.values():
            reason = _failed_rule(group, rules, pattern)
            if reason is None:
                qualifying.append(tuple(group))
            else:
                passed_over.append((tuple(group), reason))
        qualifying.sort(key=_tie_break)
        for other in qualifying[1:]:
            passed_over.append((other, f"another series of the study was chosen ({SERIES_TIE_BREAK})"))
        choices.append(SeriesChoice(study_uid, qualifying[0] if qualifying else None, tuple(passed_over)))
    return choices


def describe_selection(rules: SeriesRules | None) -> str:
    """The image-selection rule in words, for the report: one image per study, or the series rules."""
    if rules is None:
        return f"One image per study (by {SELECTION_RULE}); the study's other images are excluded."
    stated = []
    if rules.modality is not None:
        stated.append(f"Modality one of {', '.join(rules.modality)}")
    if rules.series_description is not None:
        stated.append(f"SeriesDescription matching the regular expression {rules.series_description!r}")
    if rules.body_part is not None:
        stated.append(f"BodyPartExamined one of {', '.join(rules.body_part)}")
    stated.append(f"at least {rules.min_slices} slice{'s' if rules.min_slices != 1 else ''}")
    return (
        "One series per study, read as a volume with its slices ordered by ImagePositionPatient along the "
        f"orientation normal. A series qualifies with {'; '.join(stated)}. Among qualifying series: "
        f"{SERIES_TIE_BREAK}. A study without a qualifying series is excluded."
    )


def slice_count(series: Sequence[InstanceHeader]) -> int:
    """Slices of a series: its instances, a multi-frame instance counting each frame."""
    return sum(max(1, _integer(i.values.get("NumberOfFrames"), 1)) for i in series)


def _tie_break(series: tuple[InstanceHeader, ...]) -> tuple[int, int, tuple[tuple[int, int, str], ...]]:
    first = series[0].values
    return (
        -slice_count(series),
        _integer(first.get("SeriesNumber"), 2**31),
        uid_order(first.get("SeriesInstanceUID", "")),
    )


def uid_order(uid: str) -> tuple[tuple[int, int, str], ...]:
    """Sort key of a UID: component by component as numbers ("1.2.10" after "1.2.9")."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in uid.split("."))


def _failed_rule(
    series: Sequence[InstanceHeader], rules: SeriesRules, pattern: re.Pattern[str] | None
) -> str | None:
    """The first rule the series fails, as an exclusion reason, or ``None``."""
    first = series[0].values
    if rules.modality is not None:
        modality = first.get("Modality", "")
        if modality.strip().upper() not in {m.strip().upper() for m in rules.modality}:
            return f"series not selected: Modality {modality or '(absent)'} is not one of {rules.modality}"
    if pattern is not None and not pattern.search(first.get("SeriesDescription", "")):
        return "series not selected: SeriesDescription does not match data.series.series_description"
    if rules.body_part is not None:
        part = first.get("BodyPartExamined", "")
        if " ".join(part.split()).upper() not in {" ".join(b.split()).upper() for b in rules.body_part}:
            shown = part or "(absent)"
            return f"series not selected: BodyPartExamined {shown} is not one of {rules.body_part}"
    n = slice_count(series)
    if n < rules.min_slices:
        slices = f"{n} slice{'s' if n != 1 else ''}"
        return f"series not selected: {slices}, fewer than min_slices {rules.min_slices}"
    return None


def _by_study(instances: Sequence[InstanceHeader]) -> dict[str, list[InstanceHeader]]:
    by_study: dict[str, list[InstanceHeader]] = defaultdict(list)
    for instance in instances:
        by_study[instance.study_instance_uid].append(instance)
    return {uid: by_study[uid] for uid in sorted(by_study)}
