"""``sitecal schema NAME`` prints the JSON Schema of each document it knows; an unknown name exits 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sitecal.cli import main
from sitecal.cli._schema import SCHEMAS
from sitecal.errors import DataError
from sitecal.results import (
    CalibrationDocument,
    Evaluation,
    MethodCalibrationDocument,
    MetricRow,
    ProvenanceDocument,
    json_schema,
)


@pytest.mark.parametrize(
    ("name", "names"),
    [
        ("evaluation", "urn:sitecal:evaluation.json:schema_version:"),
        ("calibration", "urn:sitecal:calibration.json:schema_version:"),
        ("calibration-method", "urn:sitecal:calibration.json:schema_version:"),
    ],
)
def test_a_document_s_schema_parses_as_json_and_names_the_document(
    name: str, names: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["schema", name]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["$id"].startswith(names)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("evaluation", Evaluation),
        ("calibration", CalibrationDocument),
        ("calibration-method", MethodCalibrationDocument),
        ("metrics", MetricRow),
        ("provenance", ProvenanceDocument),
    ],
)
def test_the_printed_schema_is_the_type_s_own(
    name: str, cls: type, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["schema", name]) == 0
    assert json.loads(capsys.readouterr().out) == json_schema(cls)


def test_the_metrics_row_and_the_protocol_have_their_schemas(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "metrics"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["title"] == "MetricRow"
    assert metrics["required"][:4] == ["attribute", "group", "metric", "stage"]
    assert main(["schema", "protocol"]) == 0
    protocol = json.loads(capsys.readouterr().out)
    assert protocol["title"] == "Protocol"
    assert "calibration" in protocol["properties"]


def test_every_schema_is_valid_draft_2020_12(capsys: pytest.CaptureFixture[str]) -> None:
    jsonschema = pytest.importorskip("jsonschema", reason="the schema check needs the test extra")
    for name in SCHEMAS:
        assert main(["schema", name]) == 0
        jsonschema.Draft202012Validator.check_schema(json.loads(capsys.readouterr().out))


def test_an_unknown_name_exits_2_listing_the_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "evalution"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "sitecal: error: schema: sitecal knows no document 'evalution'. Choose one of: evaluation, "
        "calibration, calibration-method, provenance, monitoring, metrics, protocol. "
        "Did you mean 'evaluation'?\n"
    )


_PINNED = Path(__file__).parents[1] / "e2e" / "data"


@pytest.mark.parametrize("route", ["demo", "ct"])
def test_a_run_s_provenance_follows_its_schema(route: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A real run's provenance.json (the pinned demo's and CT demo's) validates; an edited one does not."""
    jsonschema = pytest.importorskip("jsonschema", reason="the schema check needs the test extra")
    assert main(["schema", "provenance"]) == 0
    validator = jsonschema.Draft202012Validator(json.loads(capsys.readouterr().out))
    document = json.loads((_PINNED / route / "provenance.json").read_text(encoding="utf-8"))
    validator.validate(document)
    for edit in ({"document_id": "SC-123"}, {"seeds": {"split": "7"}}, {"patient_name": "x"}):
        assert not validator.is_valid(document | edit), edit
        with pytest.raises(DataError, match=r"provenance\.json: \$"):
            ProvenanceDocument.from_dict(document | edit)
