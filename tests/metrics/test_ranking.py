"""AUROC by mid-ranks, against sklearn and torchmetrics."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score
from torchmetrics.functional.classification import binary_auroc, multiclass_auroc

from sitecal.errors import DataError
from sitecal.metrics import auroc, softmax


def test_binary_by_hand_with_ties() -> None:
    # scores (class 1) .1 .4 | .4 .8 with labels 0 0 | 1 1: the four (pos, neg) pairs are
    # (.4, .1) win, (.4, .4) tie = 1/2, (.8, .1) win, (.8, .4) win -> 3.5 / 4
    probs = [[0.9, 0.1], [0.6, 0.4], [0.6, 0.4], [0.2, 0.8]]
    assert auroc(probs, [0, 0, 1, 1]) == 0.875
    assert auroc(probs, [1, 1, 0, 0]) == 0.125  # relabelled: 1 - 0.875


def test_multiclass_by_hand() -> None:
    # three rows, three classes, each class's own column ranks its positive highest -> every OvR AUC 1;
    # swapping rows 0 and 1's labels: class 0 scores [.6, .3, .1] with positive row 1: beats row 2 only: 1/2;
    # class 1 scores [.3, .5, .2] with positive row 0: beats row 2 only: 1/2; class 2 still 1 -> 2/3
    probs = np.array([[0.6, 0.3, 0.1], [0.3, 0.5, 0.2], [0.1, 0.2, 0.7]])
    assert auroc(probs, [0, 1, 2]) == 1.0
    assert auroc(probs, [1, 0, 2]) == pytest.approx(2 / 3, rel=1e-15)
    # prevalence weights for 'weighted': one row per class -> the same
    assert auroc(probs, [1, 0, 2], average="weighted") == pytest.approx(2 / 3, rel=1e-15)


def _case(n: int, c: int, seed: int, coarse: bool) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, c, n)
    logits = rng.normal(size=(n, c))
    logits[np.arange(n), labels] += 1.0
    if coarse:  # many ties
        logits = np.round(logits)
    return softmax(logits), labels


@pytest.mark.parametrize(("c", "seed", "coarse"), [(2, 0, False), (2, 1, True), (3, 2, False), (5, 3, True)])
@pytest.mark.parametrize("average", ["macro", "weighted"])
def test_equals_sklearn(c: int, seed: int, coarse: bool, average: str) -> None:
    probs, labels = _case(500, c, seed, coarse)
    if c == 2:
        ref = roc_auc_score(labels, probs[:, 1])
    else:
        ref = roc_auc_score(labels, probs, multi_class="ovr", average=average)
    assert auroc(probs, labels, average=average) == pytest.approx(ref, abs=1e-12)  # type: ignore[arg-type]


@pytest.mark.parametrize(("c", "seed", "coarse"), [(2, 4, True), (4, 5, False), (6, 6, True)])
def test_equals_torchmetrics(c: int, seed: int, coarse: bool) -> None:
    probs, labels = _case(500, c, seed, coarse)
    t_probs, t_labels = torch.tensor(probs, dtype=torch.float64), torch.tensor(labels)
    if c == 2:
        ref = binary_auroc(t_probs[:, 1], t_labels)
    else:
        ref = multiclass_auroc(t_probs, t_labels, num_classes=c, average="macro")
    assert auroc(probs, labels) == pytest.approx(float(ref), abs=1e-6)


def test_undefined_without_both_classes() -> None:
    with pytest.raises(
        DataError,
        match=re.escape(
            "The 'labels' parameter of auroc must hold both positives and negatives for every class "
            "scored. Class 1 has no positives among the 2 rows"
        ),
    ):
        auroc([[0.6, 0.4], [0.3, 0.7]], [0, 0])
    with pytest.raises(DataError, match=re.escape("Class 2 has no positives among the 2 rows")):
        auroc([[0.6, 0.2, 0.2], [0.3, 0.5, 0.2]], [0, 1])
    with pytest.raises(DataError, match=re.escape("Got 'marco'. Did you mean 'macro'?")):
        auroc([[0.6, 0.4], [0.3, 0.7]], [0, 1], average="marco")  # type: ignore[arg-type]
