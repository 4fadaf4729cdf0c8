"""Who was analysed, and where the calibrated model was most confidently wrong.

Two entries of ``evaluation.json``, built from the analysed studies without any resampling:

- ``characteristics``: for all analysed studies and for every group of every reported subgroup attribute,
  the number of studies (all, fit split, evaluation split), of patients, of each class, and the mix of sex
  and of age band within the group;
- ``highest_confidence_errors``: the evaluation-split studies whose top-label prediction after calibration
  is wrong, most confident first, listed by their pseudonymised study key.

Only counts and ratios of counts are stored (plus the confidences of the listed studies, which are fixed
by the logits and the temperatures), so the entries are identical between runs on the same data.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np

from sitecal.evaluation._groups import UNKNOWN, ordered_groups
from sitecal.evaluation._plan import EvaluationData, EvaluationPlan, EvaluationPolicy
from sitecal.evaluation._split import Split
from sitecal.results import (
    Characteristics,
    CharacteristicsNote,
    CharacteristicsRow,
    ClassCount,
    ErrorsNote,
    HighestConfidenceErrors,
    ListedError,
    MixEntry,
)

__all__ = ["MAX_ERRORS", "UNKNOWN", "characteristics", "cohort_characteristics", "highest_confidence_errors"]

#: How many highest-confidence errors ``evaluation.json`` lists.
MAX_ERRORS = 10
#: A DICOM UID (digits and dots): never written in clear.
_UID = re.compile(r"^\s*[0-9]+(\.[0-9]+)+\s*$")


def _mix(values: np.ndarray) -> tuple[MixEntry, ...]:
    """Count and share of each value, in :func:`sitecal.evaluation._groups.ordered_groups` order."""
    n = len(values)
    return tuple(
        MixEntry(value=v, count=(c := int(np.count_nonzero(values == v))), share=c / n if n else 0.0)
        for v in ordered_groups(values)
    )


def _mix_attribute(policy: EvaluationPolicy, attributes: Mapping[str, np.ndarray], tag: str) -> str | None:
    """The first subgroup (protocol order) read from ``tag`` (with bands, for PatientAge) that has values."""
    for name, settings in policy.subgroups.items():
        banded = tag != "PatientAge" or settings.bands is not None
        if settings.tag == tag and banded and name in attributes:
            return name
    return None


def _row(
    group: str,
    mask: np.ndarray,
    data: EvaluationData,
    split: Split,
    mixes: Mapping[str, str | None],
) -> CharacteristicsRow:
    n = int(mask.sum())
    total = len(data.labels)
    counts = np.bincount(data.labels[mask], minlength=len(data.class_names))
    mix = {key: None if a is None else _mix(data.attributes[a][mask]) for key, a in mixes.items()}
    return CharacteristicsRow(
        group=group,
        n=n,
        share_of_cohort=n / total if total else 0.0,
        n_fit=int((mask & split.fit).sum()),
        n_evaluation=int((mask & split.held).sum()),
        n_patients=len(set(data.patient_keys[mask].tolist())),
        classes=tuple(
            ClassCount(class_name=str(name), count=int(c), share=int(c) / n if n else 0.0)
            for name, c in zip(data.class_names, counts.tolist(), strict=True)
        ),
        sex=mix["sex"],
        age_band=mix["age_band"],
    )


def characteristics(plan: EvaluationPlan) -> Characteristics:
    """The plan's cohort and reported subgroups described (:func:`cohort_characteristics`)."""
    return cohort_characteristics(plan.policy, plan.data, plan.split)


def cohort_characteristics(
    policy: EvaluationPolicy, data: EvaluationData, split: Split | np.ndarray
) -> Characteristics:
    """Describe the analysed cohort and every reported subgroup: sizes, classes, sex and age-band mix.

    Parameters
    ----------
    policy : EvaluationPolicy
        Its ``subgroups`` say which attributes hold sex (``tag: PatientSex``) and age band
        (``tag: PatientAge`` with ``bands``); ``reported`` which attributes are described.
    data : EvaluationData
        Every analysed study (``N`` rows).
    split : Split or numpy.ndarray of bool, shape (N,)
        The fit and evaluation rows (under cross-fitting every row is both); a boolean mask is the fit
        part of one split.

    Returns
    -------
    Characteristics
        ``sex_attribute``, ``age_attribute``, ``notes``, ``tags``, ``overall``, ``subgroups``. ``overall`` and
        each entry of ``subgroups[attribute]`` (groups sorted, ``unknown`` last, groups of every split
        included) hold ``group``, ``n``, ``share_of_cohort`` (n / N), ``n_fit``, ``n_evaluation``,
        ``n_patients``, ``classes`` (``class``, ``count``, ``share`` = count / n, in ``class_names``
        order, zero counts included), ``sex`` and ``age_band`` (``value``, ``count``, ``share``, or null
        when the protocol has no such subgroup; ``notes`` then says so: ``"no_sex_attribute"``,
        ``"no_age_band_attribute"``). ``tags`` maps each described attribute to its DICOM keyword (null
        for an intersection).

    Notes
    -----
    ``tests/evaluation/test_characteristics.py`` checks every count against a hand-built cohort and pandas
    ``groupby``.
    """
    split = split if isinstance(split, Split) else Split.from_fit_mask(split)
    mixes = {
        "sex": _mix_attribute(policy, data.attributes, "PatientSex"),
        "age_band": _mix_attribute(policy, data.attributes, "PatientAge"),
    }
    notes: list[CharacteristicsNote] = []
    if mixes["sex"] is None:  # the protocol has no subgroup read from PatientSex
        notes.append("no_sex_attribute")
    if mixes["age_band"] is None:  # ... nor one read from PatientAge with bands
        notes.append("no_age_band_attribute")
    attributes = policy.reported
    subgroups = {
        name: tuple(
            _row(group, data.attributes[name] == group, data, split, mixes)
            for group in ordered_groups(data.attributes[name])
        )
        for name in attributes
    }
    return Characteristics(
        sex_attribute=mixes["sex"],
        age_attribute=mixes["age_band"],
        notes=tuple(notes),
        tags={name: policy.subgroups[name].tag for name in attributes},
        overall=_row("All studies", np.ones(len(data.labels), dtype=bool), data, split, mixes),
        subgroups=subgroups,
    )


def highest_confidence_errors(
    data: EvaluationData,
    held: np.ndarray,
    prob_sets: Mapping[str, np.ndarray],
    groups: np.ndarray,
    *,
    limit: int = MAX_ERRORS,
) -> HighestConfidenceErrors:
    """List the evaluation-split studies most confidently misclassified after calibration.

    A study is an error when the top label of its calibrated probabilities is not its true class. Errors
    are ordered by calibrated confidence (the top probability), highest first; ties by study key.

    Parameters
    ----------
    data : EvaluationData
        Every analysed study; ``study_keys`` (pseudonymised) names the listed ones.
    held : numpy.ndarray of bool, shape (N,)
        Rows in the evaluation split.
    prob_sets : mapping
        ``{"before": (M, C), "after": (M, C)}`` probabilities of the evaluation rows, in row order.
    groups : numpy.ndarray of str, shape (M,)
        Calibration group of each evaluation row (``"all"`` for a single temperature).
    limit : int, default MAX_ERRORS
        How many errors to list.

    Returns
    -------
    HighestConfidenceErrors
        ``limit``, ``n_evaluation``, ``n_errors``, ``studies`` and, when nothing can be listed, ``note``
        (``"no_study_keys"`` or ``"study_keys_look_like_uids"``).
        Each study: ``study_key``, ``calibration_group``, ``predicted``, ``true``, ``confidence_before``
        (the probability of the predicted class before calibration) and ``confidence_after``.
        Keys that look like DICOM UIDs are never listed.

    Examples
    --------
    >>> import numpy as np
    >>> from sitecal.evaluation import EvaluationData
    >>> data = EvaluationData(np.zeros((2, 2)), np.array([0, 1]), np.array(["P-1", "P-2"]), {}, ["a", "b"],
    ...                       study_keys=np.array(["S-1", "S-2"]))
    >>> p = np.array([[0.3, 0.7], [0.2, 0.8]])
    >>> out = highest_confidence_errors(data, np.array([True, True]), {"before": p, "after": p},
    ...                                 np.array(["all", "all"]))
    >>> out.n_errors, [(s.study_key, s.predicted, s.true) for s in out.studies]
    (1, [('S-1', 'b', 'a')])
    """
    before, after = prob_sets["before"], prob_sets["after"]
    labels = data.labels[held]
    predicted = after.argmax(axis=1)
    rows = np.arange(len(labels))
    confidence = after[rows, predicted]
    wrong = np.flatnonzero(predicted != labels)

    def listed(
        studies: tuple[ListedError, ...] = (), note: ErrorsNote | None = None
    ) -> HighestConfidenceErrors:
        return HighestConfidenceErrors(
            limit=limit, n_evaluation=len(labels), n_errors=len(wrong), studies=studies, note=note
        )

    if data.study_keys is None:
        return listed(note="no_study_keys")  # no study can be named
    keys = np.asarray(data.study_keys)[held].astype(str)
    if any(_UID.match(k) for k in keys.tolist()):
        return listed(note="study_keys_look_like_uids")  # never listed: pseudonymise them first
    order = wrong[np.lexsort((keys[wrong], -confidence[wrong]))][:limit]
    names: Sequence[str] = [str(c) for c in data.class_names]
    return listed(
        tuple(
            ListedError(
                study_key=str(keys[i]),
                calibration_group=str(groups[i]),
                predicted=names[int(predicted[i])],
                true=names[int(labels[i])],
                confidence_before=float(before[i, predicted[i]]),
                confidence_after=float(confidence[i]),
            )
            for i in order.tolist()
        )
    )
