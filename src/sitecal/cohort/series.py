"""Instances → studies: one image per study, chosen by a stated rule."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from sitecal.cohort.scan import InstanceHeader

__all__ = ["SELECTION_RULE", "group_by_study"]

#: How the image of a study with several instances is chosen (stated in the report).
SELECTION_RULE = "lowest InstanceNumber, then lowest SOPInstanceUID"


def _order(instance: InstanceHeader) -> tuple[int, str]:
    try:
        number = int(float(instance.values.get("InstanceNumber", "")))
    except ValueError:
        number = 2**31
    return number, instance.sop_instance_uid


def group_by_study(
    instances: Sequence[InstanceHeader],
) -> list[tuple[InstanceHeader, tuple[InstanceHeader, ...]]]:
    """Group instances by StudyInstanceUID and pick one per study.

    Returns
    -------
    list of (chosen, others)
        One entry per study, in order of StudyInstanceUID; ``others`` are the instances not analysed.
    """
    by_study: dict[str, list[InstanceHeader]] = defaultdict(list)
    for instance in instances:
        by_study[instance.study_instance_uid].append(instance)
    grouped = []
    for uid in sorted(by_study):
        members = sorted(by_study[uid], key=_order)
        grouped.append((members[0], tuple(members[1:])))
    return grouped
