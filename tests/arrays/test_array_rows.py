"""ArrayEvaluation.rows() and .table(): the rows of a run's metrics.csv, from the same function."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sitecal import evaluate_arrays
from sitecal.results import METRIC_COLUMNS, Evaluation, metrics_table


def test_rows_and_table_are_the_metrics_table_of_the_evaluation() -> None:
    rng = np.random.default_rng(3)
    site = np.where(np.arange(200) % 2 == 0, "north", "south")
    logits = rng.normal(size=(200, 2))
    labels = (rng.random(200) < 0.5).astype(int)
    result = evaluate_arrays(
        logits=logits,
        labels=labels,
        class_names=["no", "yes"],
        groups={"site": site},
        calibrate_by="site",
        n_resamples=50,
    )
    rows = result.rows()
    # the same rows as the document read back from evaluation.json would give
    expected = metrics_table(Evaluation.from_dict(result.document))
    assert rows == [row.to_dict() for row in expected]
    assert all(tuple(row) == METRIC_COLUMNS for row in rows)
    assert {(row["attribute"], row["group"]) for row in rows} == {
        ("overall", "All studies"),
        ("site", "north"),
        ("site", "south"),
    }
    pd = pytest.importorskip("pandas")
    table = result.table()
    assert isinstance(table, pd.DataFrame)
    assert tuple(table.columns) == METRIC_COLUMNS
    assert table.to_dict("records") == rows


def test_the_written_folder_holds_the_metrics_table_a_run_writes(tmp_path: Path) -> None:
    """write() puts metrics.csv beside evaluation.json: a row per (group, metric, stage), as rows()."""
    import csv

    rng = np.random.default_rng(5)
    result = evaluate_arrays(
        logits=rng.normal(size=(120, 2)),
        labels=(rng.random(120) < 0.5).astype(int),
        class_names=["no", "yes"],
        n_resamples=50,
    )
    folder = result.write(tmp_path / "run")
    with (folder / "metrics.csv").open(newline="", encoding="utf-8") as fh:
        table = list(csv.DictReader(fh))
    rows = result.rows()
    assert len(table) == len(rows) > 0
    assert [(r["group"], r["metric"], r["stage"]) for r in table] == [
        (r["group"], r["metric"], r["stage"]) for r in rows
    ]
    assert [float(r["estimate"]) for r in table] == pytest.approx([r["estimate"] for r in rows], abs=1e-12)
