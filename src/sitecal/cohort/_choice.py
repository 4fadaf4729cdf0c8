"""Which instances each study is analysed on: one image per study, or the series ``data.series`` chooses.

Whatever is not chosen, and whatever never reached the folder or could not be read, is an exclusion met
before the study is joined to its label (:mod:`sitecal.cohort._build`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from sitecal._pseudonym import Pseudonymizer
from sitecal.cohort._records import Exclusion
from sitecal.cohort.scan import InstanceHeader, ScanResult
from sitecal.cohort.series import group_by_study, select_series
from sitecal.protocol import SeriesRules

__all__ = ["Chosen", "choose", "folder_of", "series_key_of"]


@dataclass(frozen=True)
class Chosen:
    """The instances each study is analysed on, in order of StudyInstanceUID, and what went before the join.

    ``exclusions`` are the studies that never arrived, the scan's and the choice's (each with its study's
    pseudonym). ``excluded_keys`` are the join values (``data.key``) of studies excluded there, whose labels
    those exclusions account for; ``n_series`` is the number of series considered (volumes; ``None`` for
    images).
    """

    studies: tuple[tuple[InstanceHeader, ...], ...]
    exclusions: tuple[Exclusion, ...]
    excluded_keys: frozenset[str]
    n_series: int | None


def choose(
    scan: ScanResult,
    series: SeriesRules | None,
    unavailable: Sequence[Exclusion],
    *,
    key: str,
    pseudonymize: Pseudonymizer,
) -> Chosen:
    """The instances each study is analysed on, after the exclusions met before the join."""
    exclusions = [
        replace(e, key=pseudonymize("study", e.study_uid)) if e.study_uid and e.key is None else e
        for e in (*unavailable, *scan.exclusions)
    ]
    # a label of a study whose only file was excluded (or that never arrived) is accounted for by that
    # exclusion
    excluded_keys = (
        {e.study_uid for e in (*unavailable, *scan.exclusions) if e.study_uid}
        if key == "StudyInstanceUID"
        else set()
    )
    if series is None:
        chosen, n_series = _one_image_per_study(scan, pseudonymize, exclusions), None
    else:
        chosen, n_series = _chosen_series(scan, series, key, pseudonymize, exclusions, excluded_keys)
    return Chosen(tuple(chosen), tuple(exclusions), frozenset(excluded_keys), n_series)


def _one_image_per_study(
    scan: ScanResult, pseudonymize: Pseudonymizer, exclusions: list[Exclusion]
) -> list[tuple[InstanceHeader, ...]]:
    """Each study's image (:func:`group_by_study`); an exclusion for each of its other images."""
    chosen: list[tuple[InstanceHeader, ...]] = []
    for image, others in group_by_study(scan.instances):
        study_key = pseudonymize("study", image.study_instance_uid)
        exclusions.extend(
            Exclusion(
                stage="studies",
                reason="additional image in study (one image per study is analysed)",
                path=other.path.relative_to(scan.root),
                key=study_key,
                unit="image",
            )
            for other in others
        )
        chosen.append((image,))
    return chosen


def _chosen_series(
    scan: ScanResult,
    series: SeriesRules,
    key: str,
    pseudonymize: Pseudonymizer,
    exclusions: list[Exclusion],
    excluded_keys: set[str],
) -> tuple[list[tuple[InstanceHeader, ...]], int]:
    """Each study's series (:func:`select_series`) and the number of series considered.

    Each series passed over is an exclusion, and so is a study without a qualifying series, whose join
    value (``key``) goes into ``excluded_keys``: its label is accounted for by that exclusion.
    """
    chosen: list[tuple[InstanceHeader, ...]] = []
    n_series = 0
    for choice in select_series(scan.instances, series):
        n_series += len(choice.passed_over) + (choice.chosen is not None)
        study_key = pseudonymize("study", choice.study_instance_uid)
        exclusions.extend(
            Exclusion(
                stage="series",
                reason=reason,
                path=folder_of(group, scan.root),
                key=study_key,
                series_key=series_key_of(group, pseudonymize),
                unit="series",
            )
            for group, reason in choice.passed_over
        )
        if choice.chosen is None:
            exclusions.append(
                Exclusion(
                    stage="series",
                    reason="study has no series that meets data.series",
                    key=study_key,
                    study_uid=choice.study_instance_uid,
                    unit="study",
                )
            )
            join_value = choice.passed_over[0][0][0].values.get(key)
            if join_value:
                excluded_keys.add(join_value)
        else:
            chosen.append(choice.chosen)
    return chosen, n_series


def folder_of(files: Sequence[InstanceHeader], root: Path) -> Path:
    """The folder holding a series' files, relative to the DICOM folder (the file itself for one file)."""
    if len(files) == 1:
        return files[0].path.relative_to(root)
    return Path(os.path.commonpath([f.path for f in files])).relative_to(root)


def series_key_of(instances: Sequence[InstanceHeader], pseudonymize: Pseudonymizer) -> str:
    """The pseudonym of the series' SeriesInstanceUID ("" when the header has none)."""
    uid = instances[0].values.get("SeriesInstanceUID")
    return pseudonymize("series", uid) if uid else ""
