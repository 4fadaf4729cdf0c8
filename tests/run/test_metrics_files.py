"""A run folder holds metrics.csv and metrics.parquet: one row per (group, metric, stage) of evaluation.json,
sealed with the results."""

from __future__ import annotations

import csv
import json

import pytest

from sitecal.results import METRIC_COLUMNS


def test_metrics_csv_has_one_row_per_group_metric_and_stage_of_evaluation_json(small_run: dict) -> None:
    folder = small_run["folder"]
    document = json.loads((folder / "evaluation.json").read_text(encoding="utf-8"))
    groups = [document["overall"], *[g for gs in document["subgroups"].values() for g in gs]]
    with open(folder / "metrics.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == METRIC_COLUMNS
    assert [(r["attribute"], r["group"], r["metric"], r["stage"]) for r in rows] == [
        (g["attribute"], g["group"], metric, stage)
        for g in groups
        for metric in document["metrics"]
        for stage in ("before", "after", "difference")
    ]
    by_group = {(g["attribute"], g["group"]): g for g in groups}
    for r in rows:
        interval = by_group[(r["attribute"], r["group"])]["metrics"][r["metric"]][r["stage"]]
        assert [float(r[k]) for k in ("estimate", "low", "high")] == [
            interval[k] for k in ("estimate", "low", "high")
        ]
    judged = {
        (r["attribute"], r["group"], r["metric"], r["stage"]): (r["criterion"], r["outcome"]) for r in rows
    }
    for criterion in document["acceptance"]:
        for result in criterion["results"]:
            key = (criterion["scope"], result["group"], criterion["metric"], criterion["stage"])
            if key in judged:
                assert judged[key] == (criterion["id"], result["verdict"])


def test_the_seal_lists_the_metrics_files(small_run: dict) -> None:
    seal = json.loads((small_run["folder"] / "seal.json").read_text(encoding="utf-8"))
    assert "metrics.csv" in seal["files"]
    pytest.importorskip("pyarrow", reason="metrics.parquet needs pyarrow")
    assert "metrics.parquet" in seal["files"]
