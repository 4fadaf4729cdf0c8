"""compare_methods: held-out measures of each recalibration method, paired with temperature scaling.

Checked against independent computations: the temperature arm against refit_bootstrap (the same
resamples), a resample's replicate against an unweighted fit on the rows repeated by their multiplicity
and the registry's metric functions, and the findings on data built to favour one method or none.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from sitecal.calibration import fit_method
from sitecal.errors import DataError
from sitecal.metrics import brier_score, negative_log_likelihood
from sitecal.stats import BootstrapSpec, compare_methods, fit_stream_seed, refit_bootstrap
from sitecal.stats._resample import draw_chunks, make_plan


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _sample(n: int, seed: int, *, bias: tuple[float, ...] = (0.0, 0.0, 0.0), temperature: float = 2.0):
    """Logits whose true probabilities are softmax(z / temperature + bias): a class-dependent shift."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, len(bias))) * 3.0
    p = _softmax(z / temperature + np.asarray(bias))
    y = (p.cumsum(axis=1) > rng.random((n, 1))).argmax(axis=1)
    return z, y


def test_the_temperature_arm_is_refit_bootstraps_after_calibration() -> None:
    z, y = _sample(500, 1)
    patients = np.repeat(np.arange(250), 2)
    spec = BootstrapSpec(n_resamples=60, seed=7)
    kwargs = {"fit_clusters": patients[:250], "eval_clusters": patients[250:], "spec": spec}
    res = compare_methods(
        z[:250], y[:250], z[250:], y[250:], methods=("vector",), metrics=("nll", "brier"), **kwargs
    )
    ref = refit_bootstrap(z[:250], y[:250], z[250:], y[250:], metrics=("nll", "brier"), **kwargs)
    for j in range(2):  # nll, brier
        np.testing.assert_allclose(res.replicates[0, j], ref.replicates[j, 1], rtol=1e-7)
        assert res.estimates[0, j] == pytest.approx(ref.estimates[j, 1], rel=1e-8)
    assert res.get("temperature", "nll").high == pytest.approx(ref.get("nll", "after").high, rel=1e-7)


def test_a_replicate_is_an_unweighted_fit_on_the_repeated_rows() -> None:
    z, y = _sample(300, 2)
    spec = BootstrapSpec(n_resamples=5, seed=3)
    res = compare_methods(
        z[:150], y[:150], z[150:], y[150:], fit_clusters=None, eval_clusters=None,
        methods=("matrix", "isotonic"), metrics=("nll", "brier"), spec=spec,
    )  # fmt: skip
    fit_w = next(
        draw_chunks(
            make_plan(150, None, None, func="t"), seed=fit_stream_seed(3), n_resamples=5, chunk_size=5
        )
    )
    eval_w = next(draw_chunks(make_plan(150, None, None, func="t"), seed=3, n_resamples=5, chunk_size=5))
    for b in (0, 4):
        rows_f = np.repeat(np.arange(150), fit_w.weights[b].astype(int))
        rows_e = np.repeat(np.arange(150, 300), eval_w.weights[b].astype(int))
        for i, method in enumerate(res.methods):
            probs = fit_method(method, z[rows_f], y[rows_f]).probabilities(z[rows_e])[0]
            assert res.replicates[i, 0, b] == pytest.approx(
                negative_log_likelihood(probs, y[rows_e]), rel=1e-6
            )
            assert res.replicates[i, 1, b] == pytest.approx(brier_score(probs, y[rows_e]), rel=1e-6)


def test_a_class_dependent_shift_makes_vector_scaling_clearly_better() -> None:
    z, y = _sample(4000, 3, bias=(1.5, -1.0, 0.0))
    res = compare_methods(
        z[:2000], y[:2000], z[2000:], y[2000:], fit_clusters=None, eval_clusters=None,
        methods=("vector",), metrics=("nll", "brier"), spec=BootstrapSpec(n_resamples=200, seed=0),
    )  # fmt: skip
    assert res.finding("vector", "nll") == "better"
    assert res.difference("vector", "nll").high < 0.0


def test_a_pure_temperature_miscalibration_leaves_vector_scaling_within_noise() -> None:
    z, y = _sample(2000, 4)
    res = compare_methods(
        z[:1000], y[:1000], z[1000:], y[1000:], fit_clusters=None, eval_clusters=None,
        methods=("vector", "histogram"), metrics=("nll",), spec=BootstrapSpec(n_resamples=200, seed=0),
    )  # fmt: skip
    assert res.finding("vector", "nll") == "no_clear_difference"
    d = res.difference("vector", "nll")
    assert d.low < 0.0 < d.high
    # 15 bins of a top-label-free one-vs-rest histogram lose to the right one-parameter model
    assert res.finding("histogram", "nll") == "worse"


def test_bad_arguments_are_named() -> None:
    z, y = _sample(100, 5)
    common = {"fit_clusters": None, "eval_clusters": None}
    with pytest.raises(DataError, match="method='percentile'"):
        compare_methods(
            z, y, z, y, methods=("vector",), spec=BootstrapSpec(n_resamples=50, method="bca"), **common
        )
    with pytest.raises(DataError, match="unknown methods"):
        compare_methods(z, y, z, y, methods=("platt",), **common)
    with pytest.raises(DataError, match="each method once"):
        compare_methods(z, y, z, y, methods=("vector", "vector"), **common)


def test_a_zero_width_interval_says_nothing_about_the_difference() -> None:
    # one fit patient and one evaluation patient: every resample draws the same rows, all replicates equal
    z, y = _sample(200, 6)
    res = compare_methods(
        z[:150], y[:150], z[150:152], y[150:152], fit_clusters=np.zeros(150), eval_clusters=np.array([1, 1]),
        methods=("histogram",), metrics=("nll", "brier"), spec=BootstrapSpec(n_resamples=50),
    )  # fmt: skip
    d = res.difference("histogram", "nll")
    assert d.low == d.high and d.reason
    assert res.finding("histogram", "nll") == res.finding("histogram", "brier") == "no_interval"


_DIGEST = """
import hashlib, sys
import numpy as np
from sitecal.stats import BootstrapSpec, compare_methods
rng = np.random.default_rng(0)
z = rng.normal(size=(400, 3)) * 3.0
y = rng.integers(0, 3, 400)
chunk = int(sys.argv[1]) or None
res = compare_methods(z[:200], y[:200], z[200:], y[200:], fit_clusters=None, eval_clusters=None,
                      methods=("vector", "matrix", "dirichlet", "histogram", "isotonic"),
                      spec=BootstrapSpec(n_resamples=60, seed=1, chunk_size=chunk))
print(hashlib.sha256(res.replicates.tobytes() + res.estimates.tobytes()).hexdigest())
"""


def test_the_numbers_do_not_depend_on_the_thread_count_or_the_chunk_size() -> None:
    digests = set()
    for threads, chunk in (("1", "0"), ("2", "0"), ("2", "7")):
        env = {**os.environ, "OMP_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads}
        done = subprocess.run(
            [sys.executable, "-c", _DIGEST, chunk], env=env, capture_output=True, text=True, check=True
        )
        digests.add(done.stdout.strip())
    assert len(digests) == 1 and len(next(iter(digests))) == 64
