"""The JSON Schema is generated from the types, and it and from_dict accept and refuse the same documents."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from tests.results import synthetic

from sitecal.errors import DataError
from sitecal.results import CalibrationDocument, Evaluation, MethodCalibrationDocument, json_schema

jsonschema = pytest.importorskip("jsonschema", reason="the schema tests need the test extra (jsonschema)")

Document = dict[str, Any]


@pytest.fixture(scope="module")
def documents() -> dict[str, Document]:
    return {name: synthetic.document(name).document for name in synthetic.VARIANTS}


@pytest.mark.parametrize("cls", [Evaluation, CalibrationDocument, MethodCalibrationDocument])
def test_the_schema_is_valid_draft_2020_12_and_names_its_version(cls: Any) -> None:
    schema = json_schema(cls)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] == f"urn:sitecal:{cls.FILE_NAME}:schema_version:{cls.SCHEMA_VERSION}"
    assert schema["properties"]["schema_version"] == {"const": cls.SCHEMA_VERSION}
    assert schema["required"][0] == "schema_version"
    assert schema["additionalProperties"] is False
    schema["title"] = "changed"
    assert json_schema(cls)["title"] != "changed", "json_schema() must return a fresh schema"


@pytest.mark.parametrize("cls", [Evaluation, CalibrationDocument, MethodCalibrationDocument])
def test_every_ref_resolves_and_every_def_is_used(cls: Any) -> None:
    schema = json_schema(cls)
    refs = set(re.findall(r'"\$ref": "#/\$defs/(\w+)"', json.dumps(schema)))
    assert refs == set(schema.get("$defs", {}))  # a flat document has none


def test_descriptions_come_from_the_docstrings() -> None:
    schema = json_schema(Evaluation)
    row = schema["$defs"]["GroupResult"]
    assert row["description"].startswith("One group (or all studies) of the evaluation split")
    assert row["properties"]["n"] == {
        "description": "Evaluation studies in the group.",
        "type": "integer",
        "minimum": 0,
    }
    assert "temperature_source" not in row["required"]  # OrAbsent: the key may be left out ...
    assert row["properties"]["temperature_source"]["enum"] == [
        "own",
        "global_fallback",
        "shrunk",
        "global",
        "empirical_bayes",
    ]
    assert schema["$defs"]["ClassCount"]["required"] == ["class", "count", "share"]  # ... Key("class")


@pytest.mark.parametrize("variant", list(synthetic.VARIANTS))
def test_real_documents_follow_the_generated_schema(documents: dict[str, Document], variant: str) -> None:
    doc = json.loads(synthetic.file_text(documents[variant]))
    jsonschema.Draft202012Validator(json_schema(Evaluation)).validate(doc)
    Evaluation.from_dict(doc)


def _set(path: tuple[str | int, ...], value: Any) -> Callable[[Document], None]:
    def mutate(doc: Document) -> None:
        node: Any = doc
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return mutate


def _delete(path: tuple[str | int, ...]) -> Callable[[Document], None]:
    def mutate(doc: Document) -> None:
        node: Any = doc
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]

    return mutate


#: (mutation, what from_dict says after "evaluation.json: ", whether the schema alone refuses it too)
MUTATIONS: dict[str, tuple[Callable[[Document], None], str, bool]] = {
    "missing top-level key": (_delete(("verdict",)), "$.verdict: is missing (expected one of", True),
    "missing nested key": (
        _delete(("overall", "metrics", "ece", "before", "low")),
        "$.overall.metrics.ece.before.low: is missing (expected a number)",
        True,
    ),
    "missing row key": (
        _delete(("subgroups", "scanner", 1, "n_patients")),
        "$.subgroups.scanner[1].n_patients: is missing (expected an integer)",
        True,
    ),
    "wrong type": (
        _set(("subgroups", "scanner", 0, "n"), "38"),
        '$.subgroups.scanner[0].n: expected an integer, got "38"',
        True,
    ),
    "string in an interval": (
        _set(("subgroups", "sex", 1, "metrics", "ece", "after", "low"), "x"),
        '$.subgroups.sex[1].metrics.ece.after.low: expected a number, got "x"',
        True,
    ),
    "float count": (_set(("split", "n_fit"), 150.5), "$.split.n_fit: expected an integer, got 150.5", True),
    "bool count": (_set(("split", "n_fit"), True), "$.split.n_fit: expected an integer, got true", True),
    "unknown key": (
        _set(("split", "extra"), 1),
        "$.split.extra: is not a field of this object (allowed: method, fit_fraction, folds, seed,",
        True,
    ),
    "unknown metric": (
        _set(("overall", "metrics", "auroc"), copy.deepcopy({"before": {}, "after": {}, "difference": {}})),
        "$.overall.metrics.auroc.before.estimate: is missing",
        False,
    ),
    "metric of no row": (
        _delete(("subgroups", "sex", 0, "metrics", "nll")),
        "$.subgroups.sex[0].metrics.nll: is missing (every entry of the document's metrics has one)",
        False,
    ),
    "verdict outside enum": (
        _set(("verdict",), "passed"),
        '$.verdict: expected one of "pass", "fail", "inconclusive", "insufficient data", got "passed"',
        True,
    ),
    "criterion row verdict": (
        _set(("acceptance", 0, "results", 2, "verdict"), "ok"),
        '$.acceptance[0].results[2].verdict: expected one of "pass", "fail", "inconclusive", '
        '"insufficient data", got "ok"',
        True,
    ),
    "stage outside enum": (
        _set(("acceptance", 1, "stage"), "difference"),
        '$.acceptance[1].stage: expected one of "before", "after", got "difference"',
        True,
    ),
    "negative count": (
        _set(("cohort_flow", "files_found"), -1),
        "$.cohort_flow.files_found: expected a number >= 0, got -1",
        True,
    ),
    "negative bin count": (
        _set(("subgroups", "sex", 0, "reliability", "before", "count", 3), -2),
        "$.subgroups.sex[0].reliability.before.count[3]: expected a number >= 0, got -2",
        True,
    ),
    "share above one": (
        _set(("characteristics", "overall", "share_of_cohort"), 1.5),
        "$.characteristics.overall.share_of_cohort: expected a number <= 1, got 1.5",
        True,
    ),
    "temperature not positive": (
        _set(("subgroups", "scanner", 0, "temperature"), 0.0),
        "$.subgroups.scanner[0].temperature: expected a number > 0, got 0.0",
        True,
    ),
    "NaN in a group interval": (
        _set(("overall", "metrics", "nll", "before", "estimate"), float("nan")),
        "$.overall.metrics.nll.before.estimate: expected a finite number, got NaN",
        False,  # jsonschema takes NaN for a number; JSON has no NaN, and sitecal never writes one
    ),
    "null in a group interval": (
        _set(("overall", "metrics", "nll", "before", "estimate"), None),
        "$.overall.metrics.nll.before.estimate: expected a number, got null",
        True,
    ),
    "null where the key may only be absent": (
        _set(("subgroups", "sex", 0, "temperature_source"), None),
        "$.subgroups.sex[0].temperature_source: expected one of",
        True,
    ),
    "interval on a non-calibration row": (
        _set(("subgroups", "sex", 0, "temperature_interval"), {"note": "no_interval_shrunk"}),
        "$.subgroups.sex[0].temperature_interval: expected null on a row without temperature_source",
        False,  # a relation between fields: from_dict checks it
    ),
    "overall named otherwise": (
        _set(("overall", "attribute"), "all"),
        "$.overall.attribute: expected \"overall\", got 'all'",
        False,
    ),
    "a UID in clear": (
        _set(("highest_confidence_errors", "studies", 0, "study_key"), "1.2.840.10008.1"),
        "$.highest_confidence_errors.studies[0].study_key: looks like a DICOM UID",
        False,
    ),
    "a sentence where a code belongs": (
        _set(("sensitivity", "heterogeneity", "attribute_source"), "subgroup named 'site'"),
        '$.sensitivity.heterogeneity.attribute_source: expected one of "site_subgroup", '
        '"calibration_attribute", "no_site_attribute", got "subgroup named \'site\'"',
        True,
    ),
    "a warning as a sentence": (
        _set(("warnings", 0), "Scanner 'C' has 20 studies (< 30) in the evaluation split."),
        "$.warnings[0]: expected an object, got",
        True,
    ),
    "a warning on an attribute that is not reported": (
        _set(("warnings", 0, "attribute"), "site"),
        "$.warnings[0].attribute: 'site' is not a reported subgroup (scanner, sex)",
        False,
    ),
    "disparity neither note nor result": (
        _set(("disparities", "scanner", "ece", "after"), {"note": "x", "metric": "ece"}),
        "$.disparities.scanner.ece.after.note: is not a field of this object",
        True,
    ),
}


@pytest.mark.parametrize("case", list(MUTATIONS))
def test_broken_documents_are_refused_naming_the_path(documents: dict[str, Document], case: str) -> None:
    mutate, message, by_schema = MUTATIONS[case]
    doc = copy.deepcopy(documents["per-scanner-refit"])
    mutate(doc)
    with pytest.raises(DataError, match=re.escape(f"evaluation.json: {message}")) as info:
        Evaluation.from_dict(doc)
    assert isinstance(info.value, ValueError)
    assert str(info.value).endswith("write it again, or restore the unedited file.")
    if by_schema:
        assert list(jsonschema.Draft202012Validator(json_schema(Evaluation)).iter_errors(doc))


@pytest.mark.parametrize("version", [3, 5])
def test_another_schema_version_says_which_sitecal_renders_it(
    documents: dict[str, Document], version: int
) -> None:
    # schema_version 3 had no folds in its split (version 4 records cross-fitting): its run is rendered by
    # the sitecal that made it, or run again
    doc = copy.deepcopy(documents["per-scanner-refit"]) | {"schema_version": version}
    with pytest.raises(DataError) as info:
        Evaluation.from_dict(doc, source="run-7/evaluation.json")
    assert str(info.value) == (
        f"run-7/evaluation.json: $.schema_version: schema_version {version} is not supported by this sitecal "
        "(it reads schema_version 4 of Evaluation). Render this run with the sitecal version that made it "
        "(provenance.json names it), or run the protocol again with this sitecal (`sitecal run PROTOCOL`)."
    )
    assert list(jsonschema.Draft202012Validator(json_schema(Evaluation)).iter_errors(doc))


def test_a_shrunk_temperature_cannot_claim_an_interval(documents: dict[str, Document]) -> None:
    doc = copy.deepcopy(documents["shrink"])
    row = next(r for r in doc["subgroups"]["scanner"] if r.get("temperature_source") == "shrunk")
    index = doc["subgroups"]["scanner"].index(row)
    row["temperature_interval"] = {"estimate": 1.2, "low": 1.0, "high": 1.4, "n_fit": 40}
    with pytest.raises(
        DataError,
        match=re.escape(
            f"$.subgroups.scanner[{index}].temperature_interval: expected a note: a shrunk temperature "
            "has no interval"
        ),
    ):
        Evaluation.from_dict(doc)


def test_a_document_that_is_not_an_object_is_named_at_the_top_level() -> None:
    with pytest.raises(DataError, match=re.escape("evaluation.json: $: expected an object, got a list.")):
        Evaluation.from_dict([])
    with pytest.raises(DataError, match=re.escape("run-7/evaluation.json: $: expected an object, got 3.")):
        Evaluation.from_dict(3, source="run-7/evaluation.json")
