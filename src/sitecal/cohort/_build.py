"""Scan + labels → Cohort."""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from sitecal._pseudonym import Pseudonymizer
from sitecal._split_key import split_key
from sitecal._text import plural
from sitecal.cohort._choice import Chosen, choose, folder_of, series_key_of
from sitecal.cohort._header import declared_values
from sitecal.cohort._records import UNLABELLED, Cohort, Exclusion, Study
from sitecal.cohort.attributes import UNKNOWN, attribute_value, intersection_value, suppress_rare_values
from sitecal.cohort.labels import LabelTable
from sitecal.cohort.mapping import UNMAPPED, ValueMapping
from sitecal.cohort.predictions_file import PredictionRow, PredictionTable, warn_unusable_rows
from sitecal.cohort.scan import InstanceHeader, ScanResult
from sitecal.cohort.sources import source_values
from sitecal.protocol import PrivacySettings, SeriesRules, SubgroupSettings

__all__ = ["build_cohort"]

logger = logging.getLogger(__name__)

_MIN_COUNT_SHOWN: int = PrivacySettings.model_fields["min_count_shown"].default


def build_cohort(
    scan: ScanResult,
    labels: LabelTable,
    *,
    subgroups: Mapping[str, SubgroupSettings],
    mappings: Mapping[str, ValueMapping] | None = None,
    key: str,
    pseudonymize: Pseudonymizer,
    series: SeriesRules | None = None,
    min_count_shown: int = _MIN_COUNT_SHOWN,
    predictions: PredictionTable | None = None,
    labels_from_file: bool = True,
    unavailable: Sequence[Exclusion] = (),
    label_optional: bool = False,
) -> Cohort:
    """Assemble studies from scanned instances, attach subgroup attributes, labels and given predictions.

    Parameters
    ----------
    scan : ScanResult
        Headers of the instances found.
    labels : LabelTable
        Ground truth by ``key``.
    subgroups : mapping
        Subgroup name → settings: a tag (optional bands and mapping) or an intersection of tag subgroups.
    mappings : mapping, optional
        Subgroup name → its :class:`ValueMapping` (from :func:`read_mappings`), for every subgroup that
        declares a ``mapping``; applied after normalisation and banding.
    key : str
        The header field that joins labels (StudyInstanceUID or AccessionNumber).
    pseudonymize : Pseudonymizer
        Keyed hash for every identifier that is kept.
    series : SeriesRules, optional
        Given for volumes: each study's image is the series these rules choose
        (:func:`sitecal.cohort.series.select_series`); a study with no qualifying series is excluded.
        Without it, one image per study (:func:`sitecal.cohort.series.group_by_study`).
    min_count_shown : int, default 5
        ``privacy.min_count_shown``: a subgroup value of fewer labelled studies becomes
        ``"other (n < k)"`` (:func:`sitecal.cohort.attributes.suppress_rare_values`), tags first, then
        intersections; ``unknown`` and ``unmapped`` stay.
    predictions : PredictionTable, optional
        The model's outputs from a predictions file, joined on ``key`` (or on the study pseudonym, for a
        file sitecal wrote): each study gets its row's logits and column subgroups; a study without a
        row, a row without a study and an unusable row are exclusions. A labelled study whose rows are
        all unusable is excluded once, for its row's reason (and that row is not listed again); the row
        of a study excluded for another reason is accounted for by that exclusion. The file's unusable
        rows are warned of here (:func:`~sitecal.cohort.predictions_file.warn_unusable_rows`).
    unavailable : sequence of Exclusion, optional
        Studies that never reached the folder (a PACS could not send them): listed first among the
        exclusions, and their labels are accounted for by them.
    label_optional : bool, default False
        Keep a study without a label, with the label :data:`UNLABELLED` (``sitecal monitor``: labels come
        after the scores, and an unlabelled study counts in the label-free checks); a validation excludes
        it.

    Returns
    -------
    Cohort
        Labelled studies, and exclusions for extra instances, studies without label and labels without
        study: each study found is analysed or excluded once (a study's label and its predictions row
        are accounted for by it). Patients without PatientID count as one patient per study. Each study's
        ``relative_path`` is pseudonymised part by part (:meth:`Pseudonymizer.path`).

    Raises
    ------
    ValueError
        When a subgroup declares a mapping that ``mappings`` does not hold.
    """
    describe = _Describe(subgroups, _checked_mappings(subgroups, mappings), scan.root, pseudonymize)
    chosen = choose(scan, series, unavailable, key=key, pseudonymize=pseudonymize)
    joined = _join(
        chosen,
        labels,
        predictions,
        key=key,
        pseudonymize=pseudonymize,
        describe=describe,
        label_optional=label_optional,
    )
    return Cohort(
        studies=_shown(joined.studies, subgroups, min_count_shown),
        exclusions=joined.exclusions,
        files_found=scan.files_found,
        dicom_instances=len(scan.instances),
        n_studies_found=len({i.study_instance_uid for i in scan.instances}),
        n_labelled=sum(s.label != UNLABELLED for s in joined.studies),
        attributes=tuple(subgroups),
        n_series_found=chosen.n_series,
        n_series_selected=None if series is None else len(chosen.studies),
        predictions_file=(
            None if predictions is None else predictions.summary(dicom=True, labels_file=labels_from_file)
        ),
    )


def _checked_mappings(
    subgroups: Mapping[str, SubgroupSettings], mappings: Mapping[str, ValueMapping] | None
) -> dict[str, ValueMapping]:
    """The mappings given, once every subgroup that declares a mapping is known to have one."""
    mappings = dict(mappings or {})
    for name, settings in subgroups.items():
        if settings.mapping is not None and name not in mappings:
            raise ValueError(
                f"subgroup '{name}' declares mapping '{settings.mapping}': read it with "
                "sitecal.cohort.mapping.read_mappings and pass it in mappings="
            )
    return mappings


@dataclass(frozen=True)
class _Joined:
    """The studies analysed, and every exclusion in the order the cohort lists them."""

    studies: list[Study]
    exclusions: tuple[Exclusion, ...]


def _join(
    chosen: Chosen,
    labels: LabelTable,
    predictions: PredictionTable | None,
    *,
    key: str,
    pseudonymize: Pseudonymizer,
    describe: _Describe,
    label_optional: bool = False,
) -> _Joined:
    """Join each chosen study to its label (and its predictions row); an exclusion for whatever is left.

    The exclusions come in this order: those before the join, the studies without a label or a usable
    row, the unusable label rows and labels matching no study, then the predictions rows not accounted
    for by a study (:func:`prediction_row_exclusions`).
    """
    exclusions = list(chosen.exclusions)
    studies: list[Study] = []
    matched: set[str] = set()
    # keys of the predictions rows a study accounts for: analysed with its row, or excluded once, for one
    # reason (no label, or its row unusable); such a row is not listed again
    accounted: set[str] = set()
    if predictions is not None:
        warn_unusable_rows(predictions)
        accounted |= _excluded_row_keys(predictions, chosen.exclusions, chosen.excluded_keys, pseudonymize)
    for instances in chosen.studies:
        first = instances[0]
        study_key = pseudonymize("study", first.study_instance_uid)
        join_value = first.values.get(key)
        row_key = study_key if predictions is not None and predictions.pseudonymised else join_value
        if predictions is not None and row_key:
            accounted.add(row_key)
        label = labels.labels.get(join_value) if join_value else None
        if label is None and label_optional:
            label = UNLABELLED
        elif label is None:
            reason = "study has no label" if join_value else f"study has no {key} to join labels"
            exclusions.append(Exclusion(stage="labels", reason=reason, key=study_key, unit="study"))
            continue
        if label != UNLABELLED:
            matched.add(join_value)  # type: ignore[arg-type]  # a label was found by it
        row = None
        if predictions is not None:
            row, missing = _row_of(predictions, row_key)
            if row is None:
                exclusions.append(Exclusion(stage="predictions", reason=missing, key=study_key, unit="study"))
                continue
        studies.append(describe.study(instances, label, study_key, row))
    _warn_if_no_key_matches(labels, matched, key, len(chosen.studies))
    exclusions += label_row_exclusions(labels)
    exclusions += [
        Exclusion(
            stage="labels",
            reason="label matches no study",
            key=pseudonymize("study", unmatched),
            unit="label",
        )
        for unmatched in sorted(set(labels.labels) - matched - chosen.excluded_keys)
    ]
    if predictions is not None:
        exclusions += prediction_row_exclusions(predictions, accounted)
    return _Joined(studies, tuple(exclusions))


def _warn_if_no_key_matches(labels: LabelTable, matched: Collection[str], key: str, n_studies: int) -> None:
    """Warn when there are labels and studies but no label's key matches a study."""
    if labels.labels and n_studies and not matched:
        # the usual cause is a key that joins on the wrong field, not missing studies
        logger.warning(
            "none of the %d %s in the labels file matches the %s of any of the %d %s found: check "
            "data.key and data.key_column in the protocol, and that the labels belong to these studies.",
            len(labels.labels),
            plural(len(labels.labels), "key"),
            key,
            n_studies,
            plural(n_studies, "study", "studies"),
        )


def label_row_exclusions(labels: LabelTable) -> list[Exclusion]:
    """An exclusion for each row of the labels file that cannot be used, named by its line or row.

    Reasons name the problem and the location is the line or row: the cell's text (a key, or free text a
    site typed into the label column) never reaches an output.
    """
    return [
        Exclusion(
            stage="labels",
            reason=f"unusable label row: {reason}",
            key=f"{labels.numbered_by} {line}",
            unit="label",
        )
        for line, reason in labels.bad_rows  # a CSV line or a Parquet row
    ]


@dataclass(frozen=True)
class _Describe:
    """What makes a joined study a :class:`Study`: the subgroups, their mappings, the folder, the hash."""

    subgroups: Mapping[str, SubgroupSettings]
    mappings: Mapping[str, ValueMapping]
    root: Path
    pseudonymize: Pseudonymizer

    def study(
        self,
        instances: tuple[InstanceHeader, ...],
        label: int,
        study_key: str,
        row: PredictionRow | None = None,
    ) -> Study:
        """The study of these instances, with its label, pseudonyms, attributes and (given) row's logits."""
        pseudonymize = self.pseudonymize
        values = instances[0].values
        patient_id = values.get("PatientID")
        patient_key = (
            pseudonymize("patient", patient_id)
            if patient_id
            else pseudonymize("patient", "study:" + study_key)
        )
        study_uid = str(instances[0].study_instance_uid)
        order = split_key("patient", patient_id) if patient_id else split_key("study", study_uid)
        attributes = _tag_values(values, self.subgroups, self.mappings) | (
            column_values(row.columns, self.subgroups, self.mappings) if row is not None else {}
        )
        return Study(
            study_key=study_key,
            patient_key=patient_key,
            files=tuple(i.path for i in instances),
            relative_path=pseudonymize.path(folder_of(instances, self.root)),
            instance_uids=tuple(i.sop_instance_uid for i in instances),
            attributes=attributes,
            label=label,
            sources=source_values(values),
            series_key=series_key_of(instances, pseudonymize),
            series_number=values.get("SeriesNumber", ""),
            declared_values=sum(declared_values(i.values) for i in instances),
            logits=None if row is None else row.logits,
            split_key=order,
            study_order=split_key("study", study_uid),
            study_date=str(values.get("StudyDate") or ""),
        )


def _tag_values(
    values: Mapping[str, str], subgroups: Mapping[str, SubgroupSettings], mappings: Mapping[str, ValueMapping]
) -> dict[str, str]:
    """Tag subgroup name → value for one study's header values: normalised, banded, mapped."""
    tagged = {}
    for name, s in subgroups.items():
        if s.tag is not None:
            value = attribute_value(s.tag, values, s.bands)
            tagged[name] = mappings[name].group(value) if name in mappings else value
    return tagged


def column_values(
    cells: Mapping[str, str], subgroups: Mapping[str, SubgroupSettings], mappings: Mapping[str, ValueMapping]
) -> dict[str, str]:
    """Column subgroup name → value for one predictions row's cells: normalised, banded, mapped."""
    out = {}
    for name, s in subgroups.items():
        if s.column is not None:
            value = attribute_value(s.column, {s.column: cells.get(s.column, "")}, s.bands)
            out[name] = mappings[name].group(value) if name in mappings else value
    return out


def prediction_row_exclusions(table: PredictionTable, accounted: Collection[str]) -> list[Exclusion]:
    """Exclusions for the rows of a predictions file that cannot be used or match no study.

    A row whose key is in ``accounted`` belongs to a study that is analysed with it or excluded for it
    (no label, its row unusable, its file unreadable): that row is left out here, so the study is counted
    once. For a key without a usable row that is the row standing for it (``table.unusable_keys``); its
    other unusable rows are listed. Rows are named by their line (or Parquet row), never by their key.
    """
    stands_for = {table.unusable_keys[k][0] for k in accounted if k in table.unusable_keys}
    out = [
        Exclusion(
            stage="predictions",
            reason=f"unusable prediction row: {reason}",
            key=f"{table.numbered_by} {position}",
            unit="prediction",
        )
        for position, reason in table.bad_rows
        if position not in stands_for
    ]
    out += [
        Exclusion(
            stage="predictions",
            reason="prediction row matches no study",
            key=f"{table.numbered_by} {row.position}",
            unit="prediction",
        )
        for key, row in sorted(table.rows.items(), key=lambda item: item[1].position)
        if key not in accounted
    ]
    return out


def _row_of(table: PredictionTable, row_key: str | None) -> tuple[PredictionRow | None, str]:
    """A labelled study's usable row, or ``None`` and why it has none (its row unusable, or no row)."""
    if row_key:
        if row_key in table.rows:
            return table.rows[row_key], ""
        if row_key in table.unusable_keys:
            return None, f"unusable prediction row: {table.unusable_keys[row_key][1]}"
    return None, "study has no row in the predictions file"


def _excluded_row_keys(
    table: PredictionTable,
    exclusions: Sequence[Exclusion],
    excluded_keys: Collection[str],
    pseudonymize: Pseudonymizer,
) -> set[str]:
    """The predictions-file keys of studies excluded before the join, whose rows those exclusions account for.

    A study excluded before the join (its file unreadable, never retrieved, no qualifying series) accounts
    for its row as it does for its label. A file sitecal wrote is keyed by study pseudonyms; another by
    ``data.key``, of which only the values in ``excluded_keys`` are known (the StudyInstanceUIDs of
    excluded files, the join values of studies without a qualifying series).
    """
    if table.pseudonymised:
        return {pseudonymize("study", e.study_uid) for e in exclusions if e.study_uid}
    return set(excluded_keys)


def _shown(studies: Sequence[Study], subgroups: Mapping[str, SubgroupSettings], k: int) -> tuple[Study, ...]:
    """The studies with every subgroup value as it may be shown, in protocol order.

    Rare tag values are pooled first, so an intersection never joins a rare value (and shows it as part
    of a larger group); then the intersections are formed and their rare values pooled too.
    """
    kept = (UNKNOWN, UNMAPPED)
    tagged = suppress_rare_values([s.attributes for s in studies], k, keep=kept)
    joined = suppress_rare_values(
        [
            {
                name: intersection_value([row[p] for p in s.intersection])
                for name, s in subgroups.items()
                if s.intersection is not None
            }
            for row in tagged
        ],
        k,
        keep=kept,
    )
    return tuple(
        replace(study, attributes={name: {**row, **both}[name] for name in subgroups})
        for study, row, both in zip(studies, tagged, joined, strict=True)
    )
