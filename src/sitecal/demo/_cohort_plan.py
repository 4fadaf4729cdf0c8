"""The demo cohort drawn before any file is written: patients, studies and where the bad inputs go.

:func:`plan_cohort` draws every patient and study (site, scanner, date, age, label, identifiers, folder)
as a :class:`CohortPlan`; :func:`draw_planted` then draws, from the same generator and in this order,
which studies carry the planted problems (:class:`Planted`). Nothing here makes a pixel or touches disk.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ._files import age_on
from ._scanners import SCANNERS, SITES
from ._synthesis import sample_labels

__all__ = ["CohortPlan", "Planted", "draw_planted", "plan_cohort"]

_STUDIES_PER_PATIENT = ((1, 0.75), (2, 0.17), (3, 0.08))
_FIRST_DATE = dt.date(2023, 1, 2)
_DATE_SPAN_DAYS = 540


@dataclass(frozen=True)
class CohortPlan:
    """The cohort before any pixel is made: one entry per study (arrays) plus patient rows."""

    patient: NDArray[np.intp]  # patient index per study
    site: NDArray[np.intp]  # index into SITES
    scanner: NDArray[np.intp]  # index into SCANNERS
    label: NDArray[np.int64]
    date: list[dt.date]
    time: list[str]
    age: NDArray[np.intp]
    folder: list[str]  # relative folder, e.g. "site-2/s000017"
    patient_sex: NDArray[np.str_]
    patient_birth: list[dt.date]
    patient_id: list[str]
    accession: list[str]


def _unique_ints(rng: np.random.Generator, n: int, lo: int, hi: int) -> NDArray[np.int64]:
    """``n`` distinct integers from [lo, hi), in draw order (deterministic given ``rng``)."""
    out: NDArray[np.int64] = np.empty(0, dtype=np.int64)
    while out.size < n:
        draw = np.concatenate([out, rng.integers(lo, hi, 2 * n + 16)])
        _, first = np.unique(draw, return_index=True)
        out = draw[np.sort(first)][:n]
    return out


def plan_cohort(rng: np.random.Generator, n_studies: int) -> CohortPlan:
    """Draw patients, their studies, scanners, dates and labels."""
    counts_values = np.array([c for c, _ in _STUDIES_PER_PATIENT])
    counts_p = np.array([p for _, p in _STUDIES_PER_PATIENT])
    counts = rng.choice(counts_values, size=n_studies, p=counts_p)
    n_patients = int(np.searchsorted(np.cumsum(counts), n_studies) + 1)
    counts = counts[:n_patients]
    counts[-1] -= int(counts.sum()) - n_studies  # the last patient keeps only what is left

    site_of_patient = rng.choice(len(SITES), size=n_patients, p=[s.share for s in SITES])
    sex = rng.choice(np.array(["F", "M"]), size=n_patients)
    first_age = rng.integers(21, 86, n_patients)
    first_day = rng.integers(0, _DATE_SPAN_DAYS, n_patients)
    birth_u = rng.uniform(0.0, 1.0, n_patients)
    ids = _unique_ints(rng, n_patients, 1_000_000, 10_000_000)

    patient = np.repeat(np.arange(n_patients), counts)
    site = site_of_patient[patient]
    # Later studies of a patient come 30-400 days after the previous one, on any scanner of the site.
    gaps = rng.integers(30, 400, n_studies)
    first_of_patient = np.r_[True, patient[1:] != patient[:-1]]
    offset = np.where(first_of_patient, 0, gaps)
    for i in range(1, n_studies):  # a cumulative sum that restarts at every patient
        if not first_of_patient[i]:
            offset[i] += offset[i - 1]
    scanner = np.empty(n_studies, dtype=np.intp)
    u = rng.uniform(size=n_studies)
    for s_index, s in enumerate(SITES):
        members = [i for i, sc in enumerate(SCANNERS) if sc.site == s.key]
        cum = np.cumsum([SCANNERS[i].share for i in members])
        pick = np.minimum(np.searchsorted(cum / cum[-1], u), len(members) - 1)
        scanner = np.where(site == s_index, np.asarray(members)[pick], scanner)
    label = sample_labels(rng, n_studies)
    seconds = rng.integers(7 * 3600, 20 * 3600, n_studies)
    accession_numbers = _unique_ints(rng, n_studies, 10_000_000, 100_000_000)

    dates = [
        _FIRST_DATE + dt.timedelta(days=int(first_day[p] + o)) for p, o in zip(patient, offset, strict=True)
    ]
    # Birth date: (first_age + u) years before the first study, u in [0, 1); ages are then computed
    # from it. First ages 21..85 and at most ~2.2 years of follow-up keep every age within 20..90.
    births = [
        _FIRST_DATE + dt.timedelta(days=int(first_day[p]) - int((first_age[p] + birth_u[p]) * 365.2425))
        for p in range(n_patients)
    ]
    age = np.array([age_on(births[p], d) for p, d in zip(patient, dates, strict=True)], dtype=np.intp)

    counters = dict.fromkeys(range(len(SITES)), 0)
    folders = []
    for s_index in site:
        counters[int(s_index)] += 1
        folders.append(f"{SITES[int(s_index)].key}/s{counters[int(s_index)]:06d}")
    times = [f"{t // 3600:02d}{t % 3600 // 60:02d}{t % 60:02d}" for t in seconds.tolist()]
    return CohortPlan(
        patient=patient,
        site=site,
        scanner=scanner,
        label=label,
        date=dates,
        time=times,
        age=age,
        folder=folders,
        patient_sex=sex,
        patient_birth=births,
        patient_id=[f"{SITES[int(s)].id_prefix}{i}" for s, i in zip(site_of_patient, ids, strict=True)],
        accession=[f"{SITES[int(s)].id_prefix[0]}{a}" for s, a in zip(site, accession_numbers, strict=True)],
    )


@dataclass(frozen=True)
class Planted:
    """Where the planted problems go (study indices into the plan of ``n_studies + 1`` studies)."""

    unlabelled: int  # the study left out of labels.csv
    truncated: int  # the study whose file is cut in half: always the last one
    junk_folders: NDArray[np.int64]  # (2,) studies whose folders get a non-DICOM file
    orphan_position: int  # row of labels.csv given to a study that does not exist


def draw_planted(rng: np.random.Generator, n_studies: int) -> Planted:
    """Draw where the planted problems go, after the plan and in this order."""
    unlabelled = int(rng.integers(0, n_studies))
    junk_folders = rng.choice(n_studies, size=2, replace=False)
    orphan_position = int(rng.integers(0, n_studies))
    return Planted(
        unlabelled=unlabelled, truncated=n_studies, junk_folders=junk_folders, orphan_position=orphan_position
    )
