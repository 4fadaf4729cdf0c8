"""ArrayEvaluation.rows() and .table(): the rows of a run's metrics.csv, from the same function."""

from __future__ import annotations

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
