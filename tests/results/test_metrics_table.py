"""metrics.csv and .parquet: one row per (group, metric, stage) of evaluation.json, its numbers as is."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from sitecal.results import (
    METRIC_COLUMNS,
    Evaluation,
    MetricRow,
    json_schema,
    metrics_table,
    write_metrics_table,
)

GOLDEN = Path(__file__).parent / "data" / "evaluation-per-scanner-refit.json"
STAGES = ("before", "after", "difference")


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(GOLDEN.read_text(encoding="utf-8"))
    return data


@pytest.fixture(scope="module")
def evaluation(document: dict[str, Any]) -> Evaluation:
    return Evaluation.from_dict(document)


def _groups(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [document["overall"], *[g for groups in document["subgroups"].values() for g in groups]]


def test_the_columns_are_the_issue_s_in_order() -> None:
    assert METRIC_COLUMNS == (
        "attribute",
        "group",
        "metric",
        "stage",
        "estimate",
        "low",
        "high",
        "n",
        "criterion",
        "outcome",
    )
    assert METRIC_COLUMNS == tuple(f.name for f in dataclasses.fields(MetricRow))


def test_one_row_per_group_metric_and_stage_with_the_document_s_numbers(
    document: dict[str, Any], evaluation: Evaluation
) -> None:
    rows = metrics_table(evaluation)
    want = [
        (g["attribute"], g["group"], metric, stage)
        for g in _groups(document)
        for metric in document["metrics"]
        for stage in STAGES
    ]
    assert [(r.attribute, r.group, r.metric, r.stage) for r in rows] == want  # each once, in this order
    assert len(rows) == 6 * 5 * 3  # overall, scanners A-C, sexes F and M; 5 metrics; 3 stages
    groups = {(g["attribute"], g["group"]): g for g in _groups(document)}
    for r in rows:
        group = groups[(r.attribute, r.group)]
        interval = group["metrics"][r.metric][r.stage]
        assert (r.estimate, r.low, r.high) == (interval["estimate"], interval["low"], interval["high"])
        assert r.n == group["n"]


def test_criterion_and_outcome_where_a_criterion_judges_the_group_and_metric(evaluation: Evaluation) -> None:
    judged = {
        (r.attribute, r.group, r.metric, r.stage): (r.criterion, r.outcome) for r in metrics_table(evaluation)
    }
    # the golden file's acceptance: calibration-per-scanner (ece_debiased after, per scanner: A and B
    # inconclusive, C too small), accuracy-overall (accuracy after, overall: inconclusive); slope-overall
    # judges the recalibration slope, which is not a group metric, so it judges no row
    expected = {
        ("scanner", "A", "ece_debiased", "after"): ("calibration-per-scanner", "inconclusive"),
        ("scanner", "B", "ece_debiased", "after"): ("calibration-per-scanner", "inconclusive"),
        ("scanner", "C", "ece_debiased", "after"): ("calibration-per-scanner", "insufficient data"),
        ("overall", "All studies", "accuracy", "after"): ("accuracy-overall", "inconclusive"),
    }
    assert {key: value for key, value in judged.items() if value != (None, None)} == expected
    for criterion in evaluation.acceptance:
        for result in criterion.results:
            key = (criterion.scope, result.group, criterion.metric, criterion.stage)
            if key in judged:
                assert judged[key] == (criterion.id, result.verdict)


def test_several_criteria_on_one_row_are_joined_in_protocol_order(evaluation: Evaluation) -> None:
    first = evaluation.acceptance[0]
    second = dataclasses.replace(
        first,
        id="calibration-goal",
        results=tuple(dataclasses.replace(r, verdict="fail") for r in first.results),
    )
    twice = dataclasses.replace(evaluation, acceptance=(first, second))
    row = next(r for r in metrics_table(twice) if r.criterion is not None and r.group == "A")
    assert (row.criterion, row.outcome) == ("calibration-per-scanner;calibration-goal", "inconclusive;fail")
    MetricRow.from_dict(row.to_dict())  # the joined cells follow the row's own schema


def test_every_row_reads_back_through_its_schema(evaluation: Evaluation) -> None:
    jsonschema = pytest.importorskip("jsonschema", reason="the schema check needs the test extra")
    schema = json_schema(MetricRow)
    jsonschema.Draft202012Validator.check_schema(schema)
    for row in metrics_table(evaluation):
        jsonschema.validate(row.to_dict(), schema)
        assert MetricRow.from_dict(row.to_dict()) == row


def test_the_csv_and_parquet_files_hold_the_same_rows(tmp_path: Path, evaluation: Evaluation) -> None:
    written = write_metrics_table(tmp_path, evaluation)
    rows = metrics_table(evaluation)
    with open(tmp_path / "metrics.csv", newline="", encoding="utf-8") as f:
        cells = list(csv.reader(f))
    assert tuple(cells[0]) == METRIC_COLUMNS
    assert len(cells) == 1 + len(rows)
    texts = ("attribute", "group", "metric", "stage", "criterion", "outcome")
    for line, row in zip(cells[1:], rows, strict=True):
        got = dict(zip(METRIC_COLUMNS, line, strict=True))
        numbers = (float(got["estimate"]), float(got["low"]), float(got["high"]))
        # repr of a float reads back to the same float: every number exactly the document's
        assert numbers == (row.estimate, row.low, row.high)
        assert [got[c] or None for c in texts] == [getattr(row, c) for c in texts]  # null: an empty cell
        assert int(got["n"]) == row.n
    pq = pytest.importorskip("pyarrow.parquet", reason="metrics.parquet needs pyarrow")
    assert written == (tmp_path / "metrics.csv", tmp_path / "metrics.parquet")
    table = pq.read_table(tmp_path / "metrics.parquet")
    assert tuple(table.column_names) == METRIC_COLUMNS
    types = ["string"] * 4 + ["double"] * 3 + ["int64", "string", "string"]
    assert [str(t) for t in table.schema.types] == types
    assert table.to_pylist() == [row.to_dict() for row in rows]


def test_the_same_evaluation_writes_the_same_bytes(tmp_path: Path, evaluation: Evaluation) -> None:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    first = write_metrics_table(tmp_path / "a", evaluation)
    second = write_metrics_table(tmp_path / "b", evaluation)
    assert [p.name for p in first] == [p.name for p in second]
    for a, b in zip(first, second, strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name


def test_the_order_of_the_attributes_is_that_of_the_file(evaluation: Evaluation) -> None:
    # evaluation.json is written with sorted keys: the table of the evaluation a run held (attributes in
    # protocol order) must be the table of the evaluation read back from its file
    reordered = dataclasses.replace(evaluation, subgroups=dict(reversed(list(evaluation.subgroups.items()))))
    assert list(reordered.subgroups) == ["sex", "scanner"]
    assert metrics_table(reordered) == metrics_table(evaluation)
