"""Predictions file (+ labels) → Cohort, when no DICOM folder is given."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sitecal._pseudonym import Pseudonymizer
from sitecal._split_key import rank_key, split_key
from sitecal.cohort._build import _shown, column_values, prediction_row_exclusions
from sitecal.cohort._records import Cohort, Exclusion, Study
from sitecal.cohort.labels import LabelTable, label_table
from sitecal.cohort.mapping import ValueMapping
from sitecal.cohort.predictions_file import PredictionTable
from sitecal.protocol import SubgroupSettings

__all__ = ["cohort_from_predictions", "labels_from_predictions"]


def labels_from_predictions(table: PredictionTable, class_names: Sequence[str]) -> LabelTable:
    """The labels of a predictions file's label column, by the file's keys (as :func:`read_labels`)."""
    rows = [(row.position, key, row.label or "") for key, row in table.rows.items()]
    return label_table(sorted(rows), table.key_column, class_names, table.numbered_by)


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
        and labels matching no row. A row without a patient is its own patient.
    """
    studies: list[Study] = []
    exclusions: list[Exclusion] = []
    used: set[str] = set()
    # a file sitecal wrote ranks studies by (patient, study) split keys: a patient's first rank orders it
    first_rank: dict[str, int] = {}
    for row in table.rows.values():
        if row.split_rank is not None and row.patient is not None:
            first_rank[row.patient] = min(row.split_rank, first_rank.get(row.patient, row.split_rank))
    # a network's rows repeat a few combinations of subgroup cells: each is normalised, banded and mapped once
    values_of: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
    for row_key, row in sorted(table.rows.items(), key=lambda item: item[1].position):
        study_key = study_pseudonym(table, row_key, key, pseudonymize)
        used.add(row_key)
        label = labels.labels.get(row_key)
        if label is None:
            exclusions.append(
                Exclusion(stage="labels", reason="study has no label", key=study_key, unit="study")
            )
            continue
        if row.patient is None:
            patient_key = pseudonymize("patient", "study:" + study_key)
        else:
            patient_key = row.patient if table.pseudonymised else pseudonymize("patient", row.patient)
        study_order = (
            rank_key(row.split_rank)  # a file sitecal wrote
            if row.split_rank is not None
            else split_key("study" if key == "StudyInstanceUID" else key, row_key)
        )
        if row.split_rank is not None and row.patient is not None:
            order = rank_key(first_rank[row.patient])
        elif row.patient is not None:
            order = split_key("patient", row.patient)
        else:
            order = study_order
        cells = tuple(row.columns.items())
        values = values_of.get(cells)
        if values is None:
            values = values_of[cells] = column_values(row.columns, subgroups, mappings)
        studies.append(
            Study(
                study_key=study_key,
                patient_key=patient_key,
                files=(),
                relative_path="",
                instance_uids=(),
                attributes=dict(values),
                label=label,
                logits=row.logits,
                split_key=order,
                study_order=study_order,
            )
        )
    exclusions += prediction_row_exclusions(table, used)
    for line, reason in labels.bad_rows:
        exclusions.append(
            Exclusion(
                stage="labels",
                reason=f"unusable label row: {reason}",
                key=f"{labels.numbered_by} {line}",
                unit="label",
            )
        )
    for unmatched in sorted(set(labels.labels) - used):
        exclusions.append(
            Exclusion(
                stage="labels",
                reason="label matches no row of the predictions file",
                key=study_pseudonym(table, unmatched, key, pseudonymize),
                unit="label",
            )
        )
    return Cohort(
        studies=_shown(studies, subgroups, min_count_shown),
        exclusions=tuple(exclusions),
        files_found=0,
        dicom_instances=0,
        n_studies_found=len(table.rows),
        n_labelled=len(studies),
        attributes=tuple(subgroups),
        predictions_file=table.summary(dicom=False, labels_file=labels_from_file),
    )
