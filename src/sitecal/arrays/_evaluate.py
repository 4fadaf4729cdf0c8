"""The notebook route's entry point, :func:`evaluate_arrays`."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from numpy.typing import ArrayLike

from sitecal.arrays._result import ArrayEvaluation, protocol_yaml
from sitecal.arrays._rows import array_data, checked_rows, flow, row_order, scores_of
from sitecal.arrays._settings import equivalent_protocol, policy_of
from sitecal.evaluation import evaluate_plan, plan_evaluation
from sitecal.results import ProtocolRef

__all__ = ["evaluate_arrays"]


def evaluate_arrays(
    *,
    labels: ArrayLike,
    class_names: Sequence[str],
    logits: ArrayLike | None = None,
    probabilities: ArrayLike | None = None,
    patients: ArrayLike | None = None,
    studies: ArrayLike | None = None,
    key: str = "StudyInstanceUID",
    groups: Mapping[str, ArrayLike] | None = None,
    calibrate_by: str | None = None,
    acceptance: Sequence[Mapping[str, Any]] = (),
    n_resamples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    split_seed: int = 0,
    fit_fraction: float = 0.5,
    folds: int | None = None,
    fallback: str = "global",
    calibration_min_group_size: int = 50,
    refit: bool = False,
    n_bins: int = 15,
    min_group_size: int = 30,
    min_count_shown: int = 5,
    name: str = "notebook",
    intended_use: str = "Exploratory calibration analysis from a notebook.",
    progress: bool = False,
) -> ArrayEvaluation:
    """Evaluate a model's calibration per subgroup from arrays, as a run does from DICOM.

    The arrays give the ``evaluation.json`` that ``sitecal evaluate`` gives for a predictions file of the
    same rows and settings (its keys in ``studies``, its patients in ``patients``), byte for byte but for
    the protocol's hash and the listed studies' names. Rows are ordered by the split keys of their ids
    (:mod:`sitecal._split_key`): the arrays' order changes no number. Each setting is checked as the
    protocol field it stands for (in brackets) is, and an error names the argument.

    Parameters
    ----------
    labels, class_names : array_like of int, shape (N,); sequence of str
        Class index of each study; the classes, in score order.
    logits, probabilities : array_like, shape (N, C)
        The scores: give exactly one (probabilities are scaled on their logarithms).
    patients, studies : array_like, shape (N,), optional
        Each study's patient (default: its own) and id (what ``key`` names; default: its row). Never
        written; patients stay together in the split and the bootstrap.
    groups, calibrate_by : mapping of str to array_like, str, optional
        Subgroup columns (``{"site": sites}``); the one with a temperature per value (``calibration.per``).
    acceptance : sequence of mapping
        Criteria as a protocol writes them: ``{"id": "c", "metric": "ece_debiased", "below": 0.1}``.
    n_resamples, level, seed, refit
        The bootstrap (``evaluation.bootstrap``): percentile, patient-clustered, paired intervals.
    split_seed, fit_fraction, folds, fallback, calibration_min_group_size
        The split (``calibration.split``: ``folds`` cross-fits) and the small groups' fallback.
    n_bins, min_group_size, min_count_shown, name, intended_use : optional
        ECE bins; smallest group judged; smallest value shown; what the report names.

    Returns
    -------
    ArrayEvaluation

    Examples
    --------
    >>> import numpy as np
    >>> from sitecal import evaluate_arrays
    >>> rng = np.random.default_rng(0)
    >>> site = np.where(np.arange(400) % 2 == 0, "north", "south")
    >>> logits = rng.normal(size=(400, 2)) * np.where(site == "north", 3.0, 1.0)[:, None]
    >>> labels = (rng.random(400) < 1 / (1 + np.exp(logits[:, 0] - logits[:, 1]))).astype(int)
    >>> result = evaluate_arrays(logits=logits, labels=labels, class_names=["no", "yes"],
    ...                          groups={"site": site}, calibrate_by="site", n_resamples=200)
    >>> sorted({row["group"] for row in result.rows()})
    ['All studies', 'north', 'south']
    """
    scores = scores_of(logits, probabilities)
    y, columns = checked_rows(scores, labels, class_names, groups)
    order, patient_keys = row_order(patients, studies, len(y), key=key)
    cal = {"per": calibrate_by, "min_group_size": calibration_min_group_size, "fallback": fallback}
    split = (
        {"by": "patient", "fit_fraction": fit_fraction}
        if folds is None
        else {"by": "crossfit", "folds": folds}
    )
    boot = {"n_resamples": n_resamples, "level": level, "seed": seed, "refit": refit}
    ev = {"n_bins": n_bins, "min_group_size": min_group_size, "bootstrap": boot}
    policy = policy_of(
        list(columns), len(class_names), {**cal, "split": {**split, "seed": split_seed}}, ev, acceptance
    )
    record = equivalent_protocol(policy, class_names, key, name, intended_use, min_count_shown)
    data = array_data(scores, y, patient_keys, order, columns, class_names, min_count_shown)
    outcome = evaluate_plan(
        plan_evaluation(policy, data),
        protocol=ProtocolRef(name=name, sha256=hashlib.sha256(protocol_yaml(record).encode()).hexdigest()),
        cohort_flow=flow(len(y)),
        progress=progress,
    )
    scored = "logits" if logits is not None else "probabilities"
    return ArrayEvaluation.in_array_order(
        outcome, order, record, scores=scored, patients_given=patients is not None
    )
