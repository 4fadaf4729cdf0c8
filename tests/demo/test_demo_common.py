"""The pieces both demos share: local metrics, training settings checks, UIDs, the per-scanner table.

Training and checks live in ``examples/demo`` (outside the package); tests/demo/conftest.py puts that
folder on the import path.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from _checks import format_table, scanner_checks  # examples/demo (tests/demo/conftest.py)
from _ct import TrainingConfig as CtConfig
from _local_metrics import ece, fit_temperature
from _radiograph import TrainingConfig
from _training import check_config, deterministic_threads
from pydicom.uid import PYDICOM_ROOT_UID, UID
from scipy.optimize import minimize_scalar

from sitecal.demo._files import age_on, demo_uid
from sitecal.errors import DataError


def test_ece_by_hand() -> None:
    # Confidences 0.9 (bin (13/15, 14/15], right), 0.6 (bin (8/15, 9/15], upper edge, wrong), 0.7 (bin
    # (10/15, 11/15], right): one study per bin, so ECE = (|1 - 0.9| + |0 - 0.6| + |1 - 0.7|) / 3 = 1/3.
    probs = np.array([[0.9, 0.1], [0.6, 0.4], [0.3, 0.7]])
    assert ece(probs, np.array([0, 1, 1])) == pytest.approx(1 / 3, abs=1e-12)
    # All in one bin: |mean correct - mean confidence| = |2/3 - 0.9|.
    same = np.array([[0.9, 0.1]] * 3)
    assert ece(same, np.array([0, 0, 1])) == pytest.approx(abs(2 / 3 - 0.9), abs=1e-12)


def test_fit_temperature_matches_a_direct_search_over_t() -> None:
    # Labels drawn from softmax(base), logits 2 * base: the NLL-optimal temperature is near 2.
    rng = np.random.default_rng(0)
    base = 1.5 * rng.normal(size=(2000, 3))
    p = np.exp(base) / np.exp(base).sum(1, keepdims=True)
    labels = (rng.uniform(size=(2000, 1)) > p.cumsum(1)).sum(1)
    z, y = torch.from_numpy(2.0 * base), torch.from_numpy(labels)
    direct = minimize_scalar(
        lambda t: float(F.cross_entropy(z / t, y)),
        bounds=(0.05, 20.0),
        method="bounded",
        options={"xatol": 1e-8},
    )
    assert fit_temperature(z, y) == pytest.approx(direct.x, rel=1e-4)
    assert 1.7 < fit_temperature(z, y) < 2.3


@pytest.mark.parametrize("config_type", [TrainingConfig, CtConfig])
def test_training_settings_are_checked_with_the_parameter_named(config_type: type) -> None:
    with pytest.raises(DataError, match=r"^The 'n_train' parameter of TrainingConfig must be an int >= "):
        check_config(config_type(n_train=1, batch_size=8), lambda key: key)
    with pytest.raises(
        DataError, match=r"^The 'lr' parameter of TrainingConfig must be a float > 0\. Got 0\.0"
    ):
        check_config(config_type(lr=0.0), lambda key: key)

    def unknown(key: str) -> str:
        raise KeyError(f"No scanner is called {key!r}.")

    with pytest.raises(DataError, match="'scanner' parameter of TrainingConfig is unknown: No scanner"):
        check_config(config_type(), unknown)


def test_deterministic_threads_restores_the_torch_settings() -> None:
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    with pytest.raises(RuntimeError), deterministic_threads(1):
        assert torch.get_num_threads() == 1 and torch.are_deterministic_algorithms_enabled()
        raise RuntimeError("interrupted")
    assert (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()) == (threads, deterministic)


def test_demo_uids_are_valid_stable_and_hide_their_inputs() -> None:
    a = demo_uid("sitecal-demo", 123456, "study", 7)
    assert a == demo_uid("sitecal-demo", 123456, "study", 7) and UID(a).is_valid
    assert a.startswith(PYDICOM_ROOT_UID) and "123456" not in a[len(PYDICOM_ROOT_UID) :]
    assert (
        a != demo_uid("sitecal-demo-ct", 123456, "study", 7) != demo_uid("sitecal-demo", 123456, "study", 8)
    )


def test_age_on_counts_whole_years() -> None:
    import datetime as dt

    birth = dt.date(1960, 3, 15)
    assert [age_on(birth, dt.date(2020, m, d)) for m, d in ((3, 14), (3, 15), (12, 31))] == [59, 60, 60]


def test_scanner_checks_split_by_patient_and_score_each_scanner() -> None:
    rng = np.random.default_rng(1)
    n = 200
    labels = rng.integers(0, 2, n)
    logits = np.where(np.eye(2)[labels] > 0, 2.0, -2.0) + rng.normal(scale=2.0, size=(n, 2))
    scanners = ["A" if i % 3 else "B" for i in range(n)]
    patients = [f"p{i // 2}" for i in range(n)]  # two studies per patient
    rows = scanner_checks(
        logits, labels, scanners, patients, scanner_order=["B", "A"], reference="A", split_seed=0
    )
    assert [(r.scanner, r.reference) for r in rows] == [("B", False), ("A", True)]
    probs = torch.softmax(torch.from_numpy(logits), 1).numpy()
    for r in rows:
        m = np.array([s == r.scanner for s in scanners])
        assert r.n == m.sum() and 0 < r.heldout_n < r.n
        assert r.accuracy == pytest.approx(float((probs[m].argmax(1) == labels[m]).mean()))
        assert r.ece == pytest.approx(ece(probs[m], labels[m]))
    table = format_table(rows).splitlines()
    assert len(table) == 3 and table[2].startswith("A (ref)")
