"""Predictions file (+ labels) → Cohort, when no DICOM folder is given."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from sitecal._pseudonym import Pseudonymizer
from sitecal._split_key import rank_key, split_key
from sitecal.cohort._build import column_values, label_row_exclusions, prediction_row_exclusions
from sitecal.cohort._column_policy import check_subgroup_columns
from sitecal.cohort._prediction_rows import UsableRows, paused_gc
from sitecal.cohort._records import Cohort, Exclusion, Study
from sitecal.cohort.attributes import UNKNOWN, intersection_value, other_value, suppress_rare_values
from sitecal.cohort.labels import LabelTable, label_table
from sitecal.cohort.mapping import UNMAPPED, ValueMapping
from sitecal.cohort.predictions_file import PredictionTable, warn_unusable_rows
from sitecal.protocol import SubgroupSettings

__all__ = ["cohort_from_predictions", "labels_from_predictions"]

_NO_SOURCES: dict[str, str] = {}  # a study read from a predictions file has no DICOM sources (shared, empty)


def labels_from_predictions(table: PredictionTable, class_names: Sequence[str]) -> LabelTable:
    """The labels of a predictions file's label column, by the file's keys (as :func:`read_labels`)."""
    usable = _usable(table)
    labels = usable.labels if usable.labels is not None else [""] * len(usable.keys)
    # the usable rows are in the order of the file: by position, as a labels file's rows
    rows = zip(usable.positions, usable.keys, labels, strict=True)
    return label_table(rows, table.key_column, class_names, table.numbered_by)


def study_pseudonym(table: PredictionTable, key: str, key_kind: str, pseudonymize: Pseudonymizer) -> str:
    """The study pseudonym of a file's key: a DICOM run's for a StudyInstanceUID, kept for sitecal's own."""
    if table.pseudonymised:
        return key
    if key_kind == "StudyInstanceUID":
        return pseudonymize("study", key)
    return pseudonymize("study", f"{key_kind}:{key}")


def cohort_from_predictions(
    table: PredictionTable,
    labels: LabelTable,
    *,
    subgroups: Mapping[str, SubgroupSettings],
    mappings: Mapping[str, ValueMapping],
    key: str,
    pseudonymize: Pseudonymizer,
    min_count_shown: int,
    labels_from_file: bool,
) -> Cohort:
    """One study per usable row of ``table`` that has a label; subgroups from its columns.

    Parameters
    ----------
    table : PredictionTable
        From :func:`sitecal.cohort.predictions_file.read_predictions`.
    labels : LabelTable
        Ground truth by the file's keys (``data.labels``, or :func:`labels_from_predictions`).
    subgroups, mappings, min_count_shown
        As for :func:`sitecal.cohort.build_cohort`; only column subgroups and their intersections.
    labels_from_file : bool
        Whether ``labels`` came from a labels file (recorded in the cohort's predictions file summary).
    key : str
        ``data.key``: what the file's keys are (StudyInstanceUID keys get a DICOM run's pseudonyms).
    pseudonymize : Pseudonymizer
        Keyed hash for the keys and patients.

    Returns
    -------
    Cohort
        Studies in the order of the file's rows; exclusions for rows without a label, unusable rows
        and labels matching no row (a label whose key's rows are all unusable is accounted for by that
        row's exclusion, not listed again). A row without a patient is its own patient. The file's
        unusable rows are warned of here, once
        (:func:`~sitecal.cohort.predictions_file.warn_unusable_rows`).

    Raises
    ------
    DataError
        When a subgroup column shown as it is may name people (:func:`check_subgroup_columns`).
    """
    check_subgroup_columns(table, subgroups)
    warn_unusable_rows(table)
    usable = _usable(table)
    with paused_gc():
        studies, exclusions = _studies(
            usable,
            labels,
            subgroups=subgroups,
            mappings=mappings,
            key=key,
            pseudonymised=table.pseudonymised,
            pseudonymize=pseudonymize,
            min_count_shown=min_count_shown,
        )
    # every usable row was taken above: what is left to list are the rows that cannot be used
    exclusions += prediction_row_exclusions(replace(table, rows={}), set())
    exclusions += label_row_exclusions(labels)
    # a label of a key whose rows are all unusable is accounted for by that row's exclusion
    unmatched_keys = (k for k in labels.labels if k not in usable.index and k not in table.unusable_keys)
    exclusions += [
        Exclusion(
            stage="labels",
            reason="label matches no row of the predictions file",
            key=study_pseudonym(table, unmatched, key, pseudonymize),
            unit="label",
        )
        for unmatched in sorted(unmatched_keys)
    ]
    return Cohort(
        studies=tuple(studies),
        exclusions=tuple(exclusions),
        files_found=0,
        dicom_instances=0,
        n_studies_found=len(usable.keys),
        n_labelled=len(studies),
        attributes=tuple(subgroups),
        predictions_file=table.summary(dicom=False, labels_file=labels_from_file),
    )


def shown_subgroups(
    table: PredictionTable,
    subgroups: Mapping[str, SubgroupSettings],
    mappings: Mapping[str, ValueMapping],
    *,
    min_count_shown: int,
) -> dict[str, list[str]]:
    """Each usable row's subgroup values as a run shows them, by subgroup, in the order of the file.

    The values a run would give its studies: the identifier policy of the columns
    (:func:`check_subgroup_columns`), normalised, banded and mapped, rare values pooled
    (``privacy.min_count_shown``) and intersections formed, but counted over every usable row, labelled
    or not (``sitecal monitor``: scores whose labels have not come yet are shown too).

    Raises
    ------
    DataError
        When a subgroup column shown as it is may name people.
    """
    check_subgroup_columns(table, subgroups)
    usable = _usable(table)
    every = [0] * len(usable.keys)  # every row counts, as if labelled
    combo_of, shown = _shown_combinations(usable, every, subgroups, mappings, min_count_shown)
    return {name: [shown[c][name] for c in combo_of] for name in subgroups}


def _shown_values(
    values: Mapping[int, dict[str, str]],
    counts: Mapping[int, int],
    subgroups: Mapping[str, SubgroupSettings],
    k: int,
) -> dict[int, dict[str, str]]:
    """Each combination's subgroup values as they may be shown, in protocol order.

    What :func:`sitecal.cohort._build._shown` does to a list of studies, done once per distinct
    combination of column values, a combination held by ``counts[c]`` studies counting as that many:
    rare column values pooled (:func:`~sitecal.cohort.attributes.suppress_rare_values`), then the
    intersections formed from them, and their rare values pooled too.
    """
    suppress_rare_values([], k)  # refuses a k that is not an int >= 1, as for a list of studies
    kept = (UNKNOWN, UNMAPPED)
    other = other_value(k)

    def pooled(rows: Mapping[int, dict[str, str]]) -> dict[int, dict[str, str]]:
        held: Counter[tuple[str, str]] = Counter()
        for c, row in rows.items():
            for name, value in row.items():
                held[name, value] += counts[c]
        return {
            c: {
                name: value if value in kept or held[name, value] >= k else other
                for name, value in row.items()
            }
            for c, row in rows.items()
        }

    tagged = pooled(values)
    joined = pooled(
        {
            c: {
                name: intersection_value([row[p] for p in s.intersection])
                for name, s in subgroups.items()
                if s.intersection is not None
            }
            for c, row in tagged.items()
        }
    )
    return {c: {name: {**row, **joined[c]}[name] for name in subgroups} for c, row in tagged.items()}


def _usable(table: PredictionTable) -> UsableRows:
    """The table's rows column by column (made from its rows for a table not read by read_predictions)."""
    if table.usable is not None:
        return table.usable
    rows = list(table.rows.values())
    first = rows[0] if rows else None
    return UsableRows(
        keys=[row.key for row in rows],
        positions=[row.position for row in rows],
        logits=np.array([row.logits for row in rows], dtype=np.float64).reshape(len(rows), -1),
        patients=[row.patient for row in rows] if table.has_patient else None,
        labels=[row.label or "" for row in rows],
        columns={name: [row.columns[name] for row in rows] for name in (first.columns if first else {})},
        split_ranks=[row.split_rank for row in rows] if first and first.split_rank is not None else None,  # type: ignore[misc]
        index={row.key: i for i, row in enumerate(rows)},
    )


def _studies(
    usable: UsableRows,
    labels: LabelTable,
    *,
    subgroups: Mapping[str, SubgroupSettings],
    mappings: Mapping[str, ValueMapping],
    key: str,
    pseudonymised: bool,
    pseudonymize: Pseudonymizer,
    min_count_shown: int,
) -> tuple[list[Study], list[Exclusion]]:
    """The studies of the labelled rows, and an exclusion per row without a label, in file order."""
    n = len(usable.keys)
    found = list(map(labels.labels.get, usable.keys))
    combo_of, shown = _shown_combinations(usable, found, subgroups, mappings, min_count_shown)
    first_rank = _first_ranks(usable)
    study_keys = _study_keys(usable.keys, key, pseudonymised, pseudonymize)
    patient_keys, patient_orders = _patients(usable, pseudonymised, pseudonymize)
    study_kind = "study" if key == "StudyInstanceUID" else key
    studies: list[Study] = []
    exclusions: list[Exclusion] = []
    none = [None] * n
    for row_key, study_key, label, combo, patient, rank, logits in zip(
        usable.keys,
        study_keys,
        found,
        combo_of,
        none if usable.patients is None else usable.patients,
        none if usable.split_ranks is None else usable.split_ranks,
        usable.logits,
        strict=True,
    ):
        if label is None:
            exclusions.append(
                Exclusion(stage="labels", reason="study has no label", key=study_key, unit="study")
            )
            continue
        study_order = rank_key(rank) if rank is not None else split_key(study_kind, row_key)
        if patient is None:
            patient_key = pseudonymize("patient", "study:" + study_key)
            order = study_order
        else:
            patient_key = patient_keys[patient]
            # a file sitecal wrote: the patient's first rank
            order = rank_key(first_rank[patient]) if rank is not None else patient_orders[patient]
        studies.append(
            Study(
                study_key=study_key,
                patient_key=patient_key,
                files=(),
                relative_path="",
                instance_uids=(),
                attributes=shown[combo],
                label=label,
                sources=_NO_SOURCES,
                logits=logits,
                split_key=order,
                study_order=study_order,
            )
        )
    return studies, exclusions


def _shown_combinations(
    usable: UsableRows,
    found: Sequence[int | None],
    subgroups: Mapping[str, SubgroupSettings],
    mappings: Mapping[str, ValueMapping],
    k: int,
) -> tuple[list[int], dict[int, dict[str, str]]]:
    """Each row's combination of subgroup cells, and each labelled combination's values as shown.

    ``found`` holds each row's label (``None``: no label). A network's rows repeat a few combinations of
    subgroup cells: each is normalised, banded, mapped and pooled once, and its studies share the result.
    """
    combos: dict[tuple[str, ...], int] = {}
    if usable.columns:
        combo_of = list(map(combos.setdefault, zip(*usable.columns.values(), strict=True), itertools.count()))
    else:
        combo_of = [combos.setdefault((), 0)] * len(usable.keys)
    counts = Counter(c for c, label in zip(combo_of, found, strict=True) if label is not None)
    cells = {c: dict(zip(usable.columns, combo, strict=True)) for combo, c in combos.items() if c in counts}
    shown = _shown_values(
        {c: column_values(cells[c], subgroups, mappings) for c in counts}, counts, subgroups, k
    )
    return combo_of, shown


def _first_ranks(usable: UsableRows) -> dict[str, int]:
    """Each patient's first split rank, for a file sitecal wrote (empty for another)."""
    # a file sitecal wrote ranks studies by (patient, study) split keys: a patient's first rank orders it
    first_rank: dict[str, int] = {}
    if usable.split_ranks is not None and usable.patients is not None:
        for rank, patient in zip(usable.split_ranks, usable.patients, strict=True):
            if patient is not None:
                first_rank[patient] = min(rank, first_rank.get(patient, rank))
    return first_rank


def _study_keys(keys: list[str], key: str, pseudonymised: bool, pseudonymize: Pseudonymizer) -> list[str]:
    """The study pseudonym of each of a file's keys (as :func:`study_pseudonym`, a million at a time)."""
    if pseudonymised:
        return keys
    if key == "StudyInstanceUID":
        return pseudonymize.many("study", keys)
    return pseudonymize.many("study", [f"{key}:{k}" for k in keys])


def _patients(
    usable: UsableRows, pseudonymised: bool, pseudonymize: Pseudonymizer
) -> tuple[dict[str, str], dict[str, str]]:
    """Each patient's pseudonym, and its split key unless the file ranks its rows, computed once a patient."""
    patients = (
        [] if usable.patients is None else list(dict.fromkeys(p for p in usable.patients if p is not None))
    )
    patient_keys = dict(
        zip(patients, patients if pseudonymised else pseudonymize.many("patient", patients), strict=True)
    )
    patient_orders = {} if usable.split_ranks is not None else {p: split_key("patient", p) for p in patients}
    return patient_keys, patient_orders
