"""Generate the CT demo cohort: synthetic multi-series chest CT studies from two sites and three scanners.

The cohort shows two things. First, that series selection and slice ordering matter: every study has a
localizer, most have one axial soft-tissue series, some a second qualifying (sharp-kernel) series that the
tie-break must set aside, and a few only a series too short to qualify; slice files are named and written
in an order that is not the slice order, and one scanner's InstanceNumbers run backwards. Second, the
calibration phenomenon of the 2-D demo in 3-D: the bundled :class:`~sitecal.demo.ct.DemoNet3D` was trained
on ``ct-scanner-1`` only and is over-confident on the other two.

Layout written under ``out_dir``::

    dicom/site-1/st00001/se1/IM00007.dcm   study, series and file names are counters, shuffled
    labels.csv                             StudyInstanceUID,label (every study, qualifying or not)
    manifest.json                          the CtDemoManifest summary

Every random choice comes from ``numpy.random.default_rng`` streams seeded by ``seed`` (one per study,
so a study's pixels do not depend on the others); UIDs are hashes of the seed and counters. The same seed
gives byte-identical files.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sitecal._progress import progress_over

from .._files import (
    age_on,
    check_cohort_arguments,
    demo_uid,
    encode,
    prepare_out_dir,
    write_bytes,
    write_labels_csv,
    write_manifest_json,
)
from ._dicom import SeriesHeader, StudyHeader, build_slice
from ._manifest import CtDemoManifest, CtSeries, CtStudy
from ._scanners import CLASS_NAMES, REFERENCE_SCANNER, SCANNERS, SITES, CtScanner, Site, scanner_by_key
from ._study import MIN_SLICES, PREVALENCE, SeriesImage, SimulatedStudy, StudyKind, simulate_study

__all__ = [
    "CtDemoManifest",
    "CtSeries",
    "CtStudy",
    "generate_ct_demo",
    "series_sort_key",
    "simulate_cohort_study",
    "study_stream",
]

logger = logging.getLogger(__name__)

_FIRST_DATE = dt.date(2024, 2, 5)
_KIND_SHARES = (
    (StudyKind.SINGLE, 0.64),
    (StudyKind.FEWER, 0.16),
    (StudyKind.TIE_NUMBER, 0.12),
    (StudyKind.TIE_UID, 0.08),
)


def series_sort_key(n_slices: int, series_number: int, series_uid: str) -> tuple[int, int, tuple[int, ...]]:
    """Tie-break of the protocol: most slices, then lowest SeriesNumber, then lowest SeriesInstanceUID.

    UIDs compare component by component as integers; the generator only writes UID pairs that compare
    the same way as plain strings, so either reading of "lowest UID" selects the same series.
    """
    return (-n_slices, series_number, tuple(int(p) for p in series_uid.split(".")))


def study_stream(seed: int, index: int) -> np.random.Generator:
    """The random stream of study ``index``: what :func:`simulate_cohort_study` draws from."""
    return np.random.default_rng([seed, 0xC7, index])


def simulate_cohort_study(seed: int, study: CtStudy) -> SimulatedStudy:
    """Re-simulate a written study's pixels (stored values per series) from its seed and ground truth."""
    return simulate_study(
        study_stream(seed, study.index),
        scanner_by_key(study.scanner_key),
        nodule=study.label == CLASS_NAMES[1],
        kind=StudyKind(study.kind),
    )


def _uid(seed: int, *parts: object) -> str:
    return demo_uid("sitecal-demo-ct", seed, *parts)


def _ordered_pair(seed: int, index: int) -> tuple[str, str]:
    """Two series UIDs, lower first, ordered alike as strings and as integer components."""
    for salt in range(100):
        a, b = _uid(seed, "series-tie", index, salt, 0), _uid(seed, "series-tie", index, salt, 1)
        lo, hi = sorted((a, b), key=lambda u: series_sort_key(0, 0, u))
        if lo < hi:
            return lo, hi
    raise AssertionError("unreachable: 100 UID pairs all ordered differently as strings")  # pragma: no cover


@dataclass(frozen=True)
class _Row:
    patient: int
    site: int
    scanner: int
    label: int
    kind: StudyKind
    date: dt.date
    time: str


def _plan(rng: np.random.Generator, n_total: int, n_unqualified: int) -> tuple[list[_Row], dict[str, list]]:  # type: ignore[type-arg]
    rows: list[_Row] = []
    patients: dict[str, list] = {"sex": [], "birth": [], "id": []}  # type: ignore[type-arg]
    unqualified = set(rng.choice(n_total, size=n_unqualified, replace=False).tolist())
    kinds = [k for k, _ in _KIND_SHARES]
    shares = np.array([p for _, p in _KIND_SHARES])
    while len(rows) < n_total:
        p = len(patients["id"])
        site = int(rng.choice(len(SITES), p=[s.share for s in SITES]))
        patients["sex"].append(str(rng.choice(["F", "M"])))
        age = int(rng.integers(35, 86))
        first = _FIRST_DATE + dt.timedelta(days=int(rng.integers(0, 365)))
        patients["birth"].append(first - dt.timedelta(days=int((age + rng.uniform()) * 365.2425)))
        patients["id"].append(f"{SITES[site].id_prefix}{int(rng.integers(1_000_000, 10_000_000))}-{p:05d}")
        members = [i for i, s in enumerate(SCANNERS) if s.site == SITES[site].key]
        weights = np.array([SCANNERS[i].share for i in members])
        day = first
        for _ in range(1 if rng.uniform() < 0.8 else 2):  # a fifth of the patients has a follow-up scan
            if len(rows) == n_total:
                break
            kind = kinds[int(rng.choice(len(kinds), p=shares))]
            rows.append(
                _Row(
                    patient=p,
                    site=site,
                    scanner=members[int(rng.choice(len(members), p=weights / weights.sum()))],
                    label=int(rng.uniform() < PREVALENCE),
                    kind=StudyKind.TOO_SHORT if len(rows) in unqualified else kind,
                    date=day,
                    time="".join(f"{int(v):02d}" for v in (rng.integers(7, 20), *rng.integers(0, 60, 2))),
                )
            )
            day = day + dt.timedelta(days=int(rng.integers(60, 300)))
    return rows, patients


def generate_ct_demo(
    out_dir: Path, *, n_studies: int = 300, seed: int = 0, progress: bool = False
) -> CtDemoManifest:
    """Write the synthetic CT demo cohort under ``out_dir``.

    Parameters
    ----------
    out_dir : pathlib.Path
        Output folder; created if needed. It must not already hold ``dicom`` or ``labels.csv``.
    n_studies : int, default 300
        Studies with a qualifying series. ``max(2, round(0.02 * n_studies))`` studies without one are
        written in addition. At least 10.
    seed : int, default 0
        Seed of every random choice: same seed, byte-identical files.
    progress : bool, default False
        Show a progress bar.

    Returns
    -------
    CtDemoManifest

    Raises
    ------
    DataError
        If ``n_studies`` or ``seed`` is out of range.
    OutputError
        If ``out_dir`` already holds a cohort or cannot be written.

    Examples
    --------
    >>> import tempfile
    >>> manifest = generate_ct_demo(Path(tempfile.mkdtemp()), n_studies=10, seed=1)
    >>> manifest.n_studies, manifest.n_unqualified
    (10, 2)
    """
    check_cohort_arguments("generate_ct_demo", n_studies, seed)
    out_dir = Path(out_dir)
    dicom_dir, labels_csv = prepare_out_dir(out_dir, function="generate_ct_demo", cohort="CT demo cohort")

    n_unqualified = max(2, round(0.02 * n_studies))
    rng = np.random.default_rng([seed, 0xC70])
    rows, patients = _plan(rng, n_studies + n_unqualified, n_unqualified)
    counters = dict.fromkeys(range(len(SITES)), 0)
    studies: list[CtStudy] = []
    for i, row in enumerate(progress_over(rows, desc="CT demo studies", unit="study", disable=not progress)):
        counters[row.site] += 1
        folder = f"{SITES[row.site].key}/st{counters[row.site]:05d}"
        studies.append(_write_study(dicom_dir, folder, i, row, patients, seed, rng))

    write_labels_csv(labels_csv, ((s.study_uid, s.label) for s in studies))

    manifest = CtDemoManifest(
        dicom_dir=dicom_dir,
        labels_csv=labels_csv,
        n_studies=n_studies,
        n_unqualified=n_unqualified,
        n_patients=len({s.patient_id for s in studies}),
        n_series=sum(len(s.series) for s in studies),
        n_files=sum(1 for p in dicom_dir.rglob("*") if p.is_file()),
        n_labels=len(studies),
        class_names=CLASS_NAMES,
        scanners=tuple(s.model_name for s in SCANNERS),
        sites=tuple(s.institution_name for s in SITES),
        reference_scanner=scanner_by_key(REFERENCE_SCANNER).model_name,
        min_slices=MIN_SLICES,
        unqualified_studies=tuple(s.study_uid for s in studies if s.selected_series_uid is None),
        studies=tuple(studies),
        seed=seed,
    )
    write_manifest_json(out_dir, manifest.summary())
    logger.info(
        "Wrote %d CT demo studies (%d without a qualifying series), %d files, to %s",
        len(studies),
        n_unqualified,
        manifest.n_files,
        dicom_dir,
    )
    return manifest


@dataclass(frozen=True)
class _PlannedSeries:
    """One series of a study to write: its role, SeriesNumber, UID, description, kernel and images."""

    role: str  # "localizer", "primary", "secondary" or "short"
    number: int
    uid: str
    description: str
    kernel: str
    images: tuple[SeriesImage, ...]


def _write_study(
    dicom_dir: Path,
    folder: str,
    i: int,
    row: _Row,
    patients: dict[str, list],  # type: ignore[type-arg]
    seed: int,
    rng: np.random.Generator,
) -> CtStudy:
    scanner: CtScanner = SCANNERS[row.scanner]
    site = SITES[row.site]
    birth: dt.date = patients["birth"][row.patient]
    age = age_on(birth, row.date)
    study = StudyHeader(
        patient_id=patients["id"][row.patient],
        patient_name=f"DEMO^CT{row.patient + 1:05d}",
        birth_date=birth.strftime("%Y%m%d"),
        sex=patients["sex"][row.patient],
        age=f"{age:03d}Y",
        study_date=row.date.strftime("%Y%m%d"),
        study_time=row.time,
        accession=f"{site.id_prefix[0]}CT{seed % 1000:03d}{i + 1:06d}",
        study_uid=_uid(seed, "study", i),
        study_id=str(i + 1),
    )
    sim = simulate_study(study_stream(seed, i), scanner, nodule=row.label == 1, kind=row.kind)
    frame_uid = _uid(seed, "frame", i)
    plan = _series_plan(seed, i, row.kind, scanner, sim)
    series_folders = rng.permutation(len(plan)) + 1
    written = [
        _write_series(
            dicom_dir,
            f"{folder}/se{folder_no}",
            planned,
            study,
            scanner=scanner,
            site=site,
            frame_uid=frame_uid,
            series_time=row.time,
            seed=seed,
            study_index=i,
            rng=rng,
        )
        for planned, folder_no in zip(plan, series_folders, strict=True)
    ]
    selected_uid = _selected_series_uid(written, i)
    written.sort(key=lambda s: (s.series_number, s.series_uid))
    return CtStudy(
        index=i,
        study_uid=study.study_uid,
        patient_id=study.patient_id,
        site=site.institution_name,
        scanner=scanner.model_name,
        scanner_key=scanner.key,
        label=CLASS_NAMES[row.label],
        sex=study.sex,
        age=age,
        kind=row.kind.value,
        series=tuple(written),
        selected_series_uid=selected_uid,
    )


def _series_plan(
    seed: int, i: int, kind: StudyKind, scanner: CtScanner, sim: SimulatedStudy
) -> list[_PlannedSeries]:
    """The series of study ``i`` in writing order: the localizer, then the axials, the selected one first."""
    axial_role = "short" if kind is StudyKind.TOO_SHORT else "primary"
    primary_uid, secondary_uid = _uid(seed, "series", i, 2), _uid(seed, "series", i, 3)
    secondary_number = 3
    if kind is StudyKind.TIE_UID:
        primary_uid, secondary_uid = _ordered_pair(seed, i)  # the soft-kernel series gets the lower UID
        secondary_number = 2
    plan = [
        _PlannedSeries(
            "localizer", 1, _uid(seed, "series", i, 1), scanner.localizer_description, "", sim.localizers
        ),
        _PlannedSeries(
            axial_role, 2, primary_uid, scanner.primary.description, scanner.primary.kernel, (sim.primary,)
        ),
    ]
    if sim.secondary is not None:
        plan.append(
            _PlannedSeries(
                "secondary",
                secondary_number,
                secondary_uid,
                scanner.secondary.description,
                scanner.secondary.kernel,
                (sim.secondary,),
            )
        )
    return plan


def _write_series(
    dicom_dir: Path,
    series_folder: str,
    planned: _PlannedSeries,
    study: StudyHeader,
    *,
    scanner: CtScanner,
    site: Site,
    frame_uid: str,
    series_time: str,
    seed: int,
    study_index: int,
    rng: np.random.Generator,
) -> CtSeries:
    """Write the slices of one series under ``series_folder``, files named by a shuffled counter."""
    localizer = planned.role == "localizer"
    slices = [(im.geometry, k, im.stored[k]) for im in planned.images for k in range(im.geometry.n_slices)]
    n = len(slices)
    file_numbers = rng.permutation(n) + 1  # names by counter, not in slice order
    reversed_numbers = scanner.reversed_instance_numbers and not localizer
    paths: list[str] = []
    for j, (geometry, k, stored) in enumerate(slices):
        header = SeriesHeader(
            series_uid=planned.uid,
            series_number=planned.number,
            description=planned.description,
            kernel=planned.kernel,
            localizer=localizer,
            orientation=geometry.orientation,
            pixel_spacing=geometry.pixel_spacing,
            thickness=geometry.thickness,
            series_time=series_time,
        )
        ds = build_slice(
            study,
            header,
            scanner=scanner,
            site=site,
            frame_of_reference_uid=frame_uid,
            sop_uid=_uid(seed, "instance", study_index, planned.number, planned.uid[-6:], j),
            instance_number=n - j if reversed_numbers else j + 1,
            position=geometry.positions[k],
            stored=stored,
        )
        relative = f"{series_folder}/IM{int(file_numbers[j]):05d}.dcm"
        write_bytes(dicom_dir / relative, encode(ds))
        paths.append(relative)
    return CtSeries(planned.uid, planned.number, planned.description, planned.role, tuple(paths))


def _selected_series_uid(written: list[CtSeries], i: int) -> str | None:
    """The UID of the series the protocol's tie-break selects among the qualifying ones, if any."""
    qualifying = [s for s in written if s.role in ("primary", "secondary") and s.n_slices >= MIN_SLICES]
    if not qualifying:
        return None
    selected = min(qualifying, key=lambda s: series_sort_key(s.n_slices, s.series_number, s.series_uid))
    if selected.role != "primary":  # pragma: no cover - the plan above guarantees it
        raise AssertionError(f"study {i}: the tie-break would select the {selected.role} series")
    return selected.series_uid
