"""Who was analysed, and the most confident errors: two entries of ``evaluation.json``."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Annotated

from sitecal.results._codec import Record
from sitecal.results._fields import Constraint, Key, OrAbsent
from sitecal.results._kinds import CharacteristicsNote, Count, ErrorsNote, Share

__all__ = [
    "Characteristics",
    "CharacteristicsRow",
    "ClassCount",
    "HighestConfidenceErrors",
    "ListedError",
    "MixEntry",
]

#: A DICOM UID (digits and dots): never written in clear.
_UID = re.compile(r"^\s*[0-9]+(\.[0-9]+)+\s*$")


@dataclass(frozen=True, slots=True, kw_only=True)
class MixEntry(Record):
    """One value of an attribute within a row: its count and share (count / row n)."""

    value: str
    count: Count
    share: Share


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassCount(Record):
    """Studies of one class and their share of the row's n.

    Attributes
    ----------
    class_name : str
        The class (JSON key ``class``).
    """

    class_name: Annotated[str, Key("class")]
    count: Count
    share: Share


@dataclass(frozen=True, slots=True, kw_only=True)
class CharacteristicsRow(Record):
    """One group (or all analysed studies): sizes, classes, sex and age-band mix.

    Attributes
    ----------
    n : int
        Analysed studies in the group (both splits).
    share_of_cohort : float
        n / all analysed studies.
    n_fit : int
        Of which in the fit split.
    n_evaluation : int
        Of which in the evaluation split.
    n_patients : int
        Distinct patients among the n studies.
    classes : tuple of ClassCount
        Studies of each class (class_names order, zeros included).
    sex : tuple of MixEntry or None
        Sex mix (values sorted, 'unknown' last); null when the protocol has no PatientSex subgroup.
    age_band : tuple of MixEntry or None
        Age-band mix; null when the protocol has no PatientAge subgroup with bands.
    """

    group: str
    n: Count
    share_of_cohort: Share
    n_fit: Count
    n_evaluation: Count
    n_patients: Count
    classes: tuple[ClassCount, ...]
    sex: tuple[MixEntry, ...] | None
    age_band: tuple[MixEntry, ...] | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Characteristics(Record):
    """Who was analysed: all analysed studies and every group of every reported attribute.

    Groups of every split, sorted, 'unknown' last; counts and ratios of counts only.

    Attributes
    ----------
    sex_attribute : str or None
        The subgroup read from PatientSex; null when the protocol has none.
    age_attribute : str or None
        The subgroup read from PatientAge with bands; null when the protocol has none.
    notes : tuple of str
        Codes of what is not described and why: 'no_sex_attribute' (no subgroup read from PatientSex),
        'no_age_band_attribute' (none read from PatientAge with bands).
    tags : Mapping of str to str or None
        Per described attribute, the DICOM keyword it is read from (null for an intersection).
    """

    sex_attribute: str | None
    age_attribute: str | None
    notes: tuple[CharacteristicsNote, ...]
    tags: Mapping[str, str | None]
    overall: CharacteristicsRow
    subgroups: Mapping[str, tuple[CharacteristicsRow, ...]]


@dataclass(frozen=True, slots=True, kw_only=True)
class ListedError(Record):
    """An evaluation study whose top label after calibration is wrong.

    Attributes
    ----------
    study_key : str
        Pseudonymised study key (as in cohort.csv), never a UID.
    calibration_group : str
        The group whose temperature was applied ('all' for one temperature).
    predicted : str
        Top label after calibration.
    true : str
        The study's label.
    confidence_before : float
        Probability of the predicted class before calibration.
    confidence_after : float
        Probability of the predicted class after calibration.
    """

    study_key: Annotated[str, Constraint(min_length=1)]
    calibration_group: str
    predicted: str
    true: str
    confidence_before: Share
    confidence_after: Share

    def _problems(self) -> Iterator[tuple[str, str]]:
        if _UID.match(self.study_key):
            yield ".study_key", "looks like a DICOM UID, which is never written in clear: pseudonymise it"


@dataclass(frozen=True, slots=True, kw_only=True)
class HighestConfidenceErrors(Record):
    """The evaluation studies most confidently wrong after calibration, by pseudonymised key only.

    Attributes
    ----------
    limit : int
        At most this many studies are listed.
    n_evaluation : int
        Studies in the evaluation split.
    n_errors : int
        Evaluation studies whose top label after calibration is wrong.
    studies : tuple of ListedError
        Highest calibrated confidence first (ties by study key).
    note : str or None
        Why no study is listed: 'no_study_keys' (none were passed to the evaluation) or
        'study_keys_look_like_uids' (never listed: pseudonymise them first).
    """

    limit: Annotated[int, Constraint(minimum=1)]
    n_evaluation: Count
    n_errors: Count
    studies: tuple[ListedError, ...]
    note: OrAbsent[ErrorsNote] = None
