"""evaluation.json holds codes and numbers, never a sentence: the report words them.

Two checks: on the types (every plain string field of the document is a name, listed here with what it
names; the rest are closed vocabularies), and on documents the evaluation writes (no string outside the
protocol's own texts reads as prose).
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from tests.results import synthetic
from tests.results.sentences import FREE_TEXT, sentences

from sitecal.metrics import _recalibration
from sitecal.results import Evaluation
from sitecal.results._fields import dataclass_fields, strip_annotated
from sitecal.results._kinds import CODE_VOCABULARIES, IntervalNote, RecalibrationNote, SiteExclusionReason
from sitecal.stats._intervals import INTERVAL_REASONS

#: Every field of the evaluation document typed as a plain string (not a closed vocabulary), with what it
#: holds. A new one must name something (or be the protocol's own words): a sentence belongs in the report.
NAME_FIELDS = {
    "ProtocolRef.name": "the protocol's name",
    "ProtocolRef.sha256": "a hex digest",
    "GroupResult.membership": "a hex fingerprint of the group's evaluation rows",
    "Evaluation.class_names": "the model's classes",
    "Evaluation.calibration_attribute": "a subgroup attribute",
    "Evaluation.metrics": "metric names of the registry",
    "Evaluation.attribute_labels": "the protocol's display labels",
    "SplitSettings.stratify": "a subgroup attribute",
    "BootstrapSettings.strata": "a subgroup attribute",
    "BootstrapSettings.refit_scope": "a subgroup attribute or 'overall'",
    "GroupResult.attribute": "a subgroup attribute or 'overall'",
    "GroupResult.group": "a group's value",
    "GroupWarning.attribute": "a subgroup attribute",
    "GroupWarning.group": "a group's value",
    "Disparity.metric": "a metric name",
    "Disparity.groups": "groups' values",
    "Disparity.highest": "a group's value",
    "Disparity.lowest": "a group's value",
    "Criterion.id": "the protocol's criterion id",
    "Criterion.description": "the protocol's description of the criterion (null: none)",
    "Criterion.metric": "a metric name",
    "Criterion.scope": "a subgroup attribute or 'overall'",
    "CriterionResult.group": "a group's value",
    "ExclusionCount.reason": "the cohort layer's exclusion reason",
    "ValueCount.value": "a DICOM header value",
    "SourceMonths.first": "YYYY-MM",
    "SourceMonths.last": "YYYY-MM",
    "Characteristics.sex_attribute": "a subgroup attribute",
    "Characteristics.age_attribute": "a subgroup attribute",
    "Characteristics.tags": "DICOM keywords",
    "CharacteristicsRow.group": "a group's value",
    "MixEntry.value": "a group's value",
    "ClassCount.class": "a class",
    "ListedError.study_key": "a pseudonymised study key",
    "ListedError.calibration_group": "a group's value",
    "ListedError.predicted": "a class",
    "ListedError.true": "a class",
    "RecalibrationGroup.attribute": "a subgroup attribute or 'overall'",
    "RecalibrationGroup.group": "a group's value",
    "HeterogeneitySite.group": "a site",
    "HeterogeneityExcluded.group": "a site",
    "Heterogeneity.attribute": "the site attribute",
    "LeaveOneSiteOut.attribute": "the site attribute",
    "LeaveOneSiteOut.metrics": "metric names of the registry",
    "LeftOutSite.left_out": "a site",
    "MethodComparison.methods": "recalibration method names (sitecal.calibration.METHODS)",
    "MethodComparison.metrics": "metric names of the registry",
    "ComparedGroup.attribute": "the calibration attribute or 'overall'",
    "ComparedGroup.group": "a group's value",
}


def _string_fields(cls: type, seen: set[type], out: set[str]) -> None:
    """``Class.field`` of every field whose type holds a plain ``str`` (a ``Literal`` is a vocabulary)."""
    if cls in seen:
        return
    seen.add(cls)
    for field in dataclass_fields(cls):

        def visit(hint: Any, name: str = field.name) -> None:
            hint, _ = strip_annotated(hint)
            origin = typing.get_origin(hint)
            if hint is str:
                out.add(f"{cls.__name__}.{name}")
            elif dataclasses.is_dataclass(hint):
                _string_fields(typing.cast(type, hint), seen, out)
            elif origin in (typing.Union, types.UnionType, tuple):
                for arg in typing.get_args(hint):
                    if arg is not Ellipsis:
                        visit(arg)
            elif origin in (dict, Mapping):
                visit(typing.get_args(hint)[1])

        visit(field.hint)


def test_every_plain_string_field_names_something() -> None:
    found: set[str] = set()
    _string_fields(Evaluation, set(), found)
    assert found == set(NAME_FIELDS)


def test_codes_are_unique_across_the_vocabularies() -> None:
    codes = [code for vocabulary in CODE_VOCABULARIES for code in typing.get_args(vocabulary)]
    assert len(codes) == len(set(codes))
    assert all(code and code == code.lower() and " " not in code for code in codes)


def test_the_numeric_core_writes_codes_of_the_vocabularies() -> None:
    assert set(INTERVAL_REASONS) == set(typing.get_args(IntervalNote))
    fits = {_recalibration.NO_CORRECT, _recalibration.ALL_CORRECT, _recalibration.SEPARATED}
    assert fits | {_recalibration.NOT_CONVERGED} <= set(typing.get_args(RecalibrationNote))
    assert {_recalibration.NO_LOG, _recalibration.ONE_CLUSTER} <= set(typing.get_args(SiteExclusionReason))


def test_the_finder_finds_the_sentences_the_evaluation_used_to_write() -> None:
    old = {
        "warnings": [
            "Scanner 'C' has 20 studies (< 30) in the evaluation split: its intervals are wide and it is not "
            "judged."
        ],
        "sensitivity": {"heterogeneity": {"attribute_source": "subgroup named 'site'"}},
        "highest_confidence_errors": {"note": "study keys were not passed to the evaluation"},
        "acceptance": [{"description": "Upper 95% CI of ECE after calibration below 0.2 in every group"}],
        "attribute_labels": {"sex_age": "sex by age band of the patient"},
    }
    assert [path for path, _ in sentences(old)] == [
        "$.warnings[]",
        "$.highest_confidence_errors.note",
    ]  # the two-word source passes the finder: the types refuse it (tests/results/test_results_schema.py)
    assert "$.acceptance[].description" in FREE_TEXT


@pytest.mark.parametrize("variant", list(synthetic.VARIANTS))
def test_an_evaluation_document_holds_no_sentence(variant: str) -> None:
    document = synthetic.document(variant).document
    assert sentences(document) == []
    assert document["characteristics"]["notes"] == ["no_age_band_attribute"]  # a code where a sentence was


def test_the_report_fixture_holds_no_sentence() -> None:
    path = Path(__file__).parents[1] / "report" / "fixtures" / "evaluation.json"
    assert sentences(json.loads(path.read_text(encoding="utf-8"))) == []
