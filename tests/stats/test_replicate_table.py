"""One table of paired replicates: every engine's result reads its intervals through it."""

from __future__ import annotations

import numpy as np
import pytest

from sitecal.errors import DataError
from sitecal.stats import BootstrapSpec, bootstrap_metrics
from sitecal.stats._intervals import interval_result
from sitecal.stats._replicate_table import ReplicateTable


def _table(**changes: object) -> ReplicateTable:
    rng = np.random.default_rng(0)
    values: dict[str, object] = {
        "rows": ("ece", "nll"),
        "columns": ("before", "after"),
        "estimates": rng.random((2, 2)),
        "replicates": rng.random((2, 2, 50)),
        "spec": BootstrapSpec(n_resamples=50),
        "n": 40,
        "n_clusters": 30,
        "n_strata": 2,
    }
    values.update(changes)
    return ReplicateTable(**values)  # type: ignore[arg-type]


def test_cells_and_differences_are_the_intervals_of_their_replicates() -> None:
    table = _table()
    spec = table.spec
    got = table.get("nll", "after")
    want = interval_result(
        float(table.estimates[1, 1]), table.replicates[1, 1], None, spec=spec, n=40, n_clusters=30, n_strata=2
    )
    assert got == want
    diff = table.difference(("nll", "after"), ("ece", "before"))
    want_diff = interval_result(
        float(table.estimates[1, 1] - table.estimates[0, 0]),
        table.replicates[1, 1] - table.replicates[0, 0],
        None,
        spec=spec,
        n=40,
        n_clusters=30,
        n_strata=2,
    )
    assert diff == want_diff
    as_dict = table.to_dict([("after", "before")])
    assert (
        as_dict["differences"]["ece"]["after - before"]
        == table.difference(("ece", "after"), ("ece", "before")).to_dict()
    )
    assert set(as_dict["intervals"]) == {"ece", "nll"}


def test_the_arrays_are_read_only_and_their_shapes_checked_once() -> None:
    table = _table()
    with pytest.raises(ValueError, match="read-only"):
        table.replicates[0, 0, 0] = 1.0
    with pytest.raises(DataError, match=r"Engine: replicates of shape \(2, 2, 49\), not \(2, 2, 50\)"):
        _table(replicates=np.zeros((2, 2, 49)), owner="Engine")
    with pytest.raises(DataError, match=r"estimates of shape \(2, 3\), not \(2, 2\)"):
        _table(estimates=np.zeros((2, 3)))


def test_an_unknown_name_is_refused_with_the_known_ones() -> None:
    table = _table(axes=("method", "metric"), owner="MethodComparison")
    with pytest.raises(
        DataError, match=r"'method' parameter of MethodComparison.get must be one of 'ece', 'nll'"
    ):
        table.get("brier", "after")
    with pytest.raises(DataError, match=r"'metric' parameter of MethodComparison\.difference"):
        table.difference(("ece", "later"), ("ece", "before"))


def test_every_engine_result_defaults_to_after_minus_before() -> None:
    rng = np.random.default_rng(1)
    probs = rng.dirichlet([1.0, 1.0, 1.0], size=80)
    labels = rng.integers(0, 3, 80)
    res = bootstrap_metrics(
        {"before": probs, "after": probs[::-1]},
        labels,
        clusters=None,
        metrics=("nll",),
        spec=BootstrapSpec(n_resamples=60),
    )
    assert res.difference("nll") == res.difference("nll", "after", "before")
    assert res.difference("nll").estimate == pytest.approx(
        res.get("nll", "after").estimate - res.get("nll", "before").estimate
    )
