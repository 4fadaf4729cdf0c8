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

import csv
import datetime as dt
import io
import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pydicom
from pydicom.uid import PYDICOM_ROOT_UID, generate_uid
from tqdm.auto import tqdm

from ...errors import DataError, OutputError
from ._dicom import SeriesHeader, StudyHeader, build_slice
from ._scanners import CLASS_NAMES, REFERENCE_SCANNER, SCANNERS, SITES, CtScanner, scanner_by_key
from ._study import MIN_SLICES, SeriesImage, SimulatedStudy, StudyKind, simulate_study

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
_PREVALENCE = 0.4
_KIND_SHARES = (
    (StudyKind.SINGLE, 0.64),
    (StudyKind.FEWER, 0.16),
    (StudyKind.TIE_NUMBER, 0.12),
    (StudyKind.TIE_UID, 0.08),
)


@dataclass(frozen=True)
class CtSeries:
    """One written series (ground truth for tests).

    Attributes
    ----------
    series_uid : str
        SeriesInstanceUID.
    series_number : int
        SeriesNumber.
    description : str
        SeriesDescription.
    role : str
        ``"localizer"``, ``"primary"`` (the soft-kernel axial series), ``"secondary"`` (the sharp-kernel
        one) or ``"short"`` (a primary series with fewer than ``min_slices`` slices).
    slice_files : tuple of str
        Paths relative to ``dicom_dir``, in slice order (ascending projection of ImagePositionPatient on
        the normal); the file names are not in this order.
    """

    series_uid: str
    series_number: int
    description: str
    role: str
    slice_files: tuple[str, ...]

    @property
    def n_slices(self) -> int:
        """Number of instances."""
        return len(self.slice_files)


@dataclass(frozen=True)
class CtStudy:
    """One generated study (ground truth; the pipeline must find all of this from the files).

    Attributes
    ----------
    index : int
        Position in the cohort (its stream is ``study_stream(seed, index)``).
    study_uid, patient_id : str
        StudyInstanceUID and PatientID.
    site, scanner, scanner_key : str
        InstitutionName, ManufacturerModelName and profile key.
    label : str
        Class name.
    sex : str
        ``"M"`` or ``"F"``.
    age : int
        Age in years.
    kind : str
        A :class:`StudyKind` value: what the selection rules meet in this study.
    series : tuple of CtSeries
        Every series, in SeriesNumber order.
    selected_series_uid : str or None
        The series the protocol's rules and tie-break choose; None when no series qualifies.
    """

    index: int
    study_uid: str
    patient_id: str
    site: str
    scanner: str
    scanner_key: str
    label: str
    sex: str
    age: int
    kind: str
    series: tuple[CtSeries, ...]
    selected_series_uid: str | None

    @property
    def selected(self) -> CtSeries | None:
        """The selected series, or None."""
        return next((s for s in self.series if s.series_uid == self.selected_series_uid), None)


@dataclass(frozen=True)
class CtDemoManifest:
    """What :func:`generate_ct_demo` wrote.

    Attributes
    ----------
    dicom_dir, labels_csv : pathlib.Path
        The DICOM tree and the ground truth (``StudyInstanceUID,label``, one row per study).
    n_studies : int
        Studies with a qualifying series (the ``n_studies`` asked for).
    n_unqualified : int
        Extra studies whose only axial series is too short; the pipeline must exclude them.
    n_patients, n_series, n_files, n_labels : int
        Distinct patients, series, files under ``dicom_dir`` and rows of ``labels.csv``.
    class_names : tuple of str
        ``("no_nodule", "nodule")``, in logit order.
    scanners, sites : tuple of str
        ManufacturerModelName of each scanner and InstitutionName of each site.
    reference_scanner : str
        ManufacturerModelName of the scanner the bundled model was trained on.
    min_slices : int
        Fewest slices of a qualifying series.
    unqualified_studies : tuple of str
        StudyInstanceUIDs of the studies without a qualifying series.
    studies : tuple of CtStudy
        Every study.
    seed : int
        The seed.
    """

    dicom_dir: Path
    labels_csv: Path
    n_studies: int
    n_unqualified: int
    n_patients: int
    n_series: int
    n_files: int
    n_labels: int
    class_names: tuple[str, ...]
    scanners: tuple[str, ...]
    sites: tuple[str, ...]
    reference_scanner: str
    min_slices: int
    unqualified_studies: tuple[str, ...]
    studies: tuple[CtStudy, ...]
    seed: int

    def summary(self) -> dict[str, object]:
        """JSON-ready summary without the per-study list (what ``manifest.json`` holds)."""
        data = asdict(self)
        data.pop("studies")
        data["dicom_dir"] = self.dicom_dir.name
        data["labels_csv"] = self.labels_csv.name
        data["kinds"] = {k.value: sum(s.kind == k for s in self.studies) for k in StudyKind}
        return data


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
    return str(
        generate_uid(prefix=PYDICOM_ROOT_UID, entropy_srcs=["sitecal-demo-ct", str(seed), *map(str, parts)])
    )


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
                    label=int(rng.uniform() < _PREVALENCE),
                    kind=StudyKind.TOO_SHORT if len(rows) in unqualified else kind,
                    date=day,
                    time="".join(f"{int(v):02d}" for v in (rng.integers(7, 20), *rng.integers(0, 60, 2))),
                )
            )
            day = day + dt.timedelta(days=int(rng.integers(60, 300)))
    return rows, patients


def _encode(ds: pydicom.Dataset) -> bytes:
    buffer = io.BytesIO()
    pydicom.dcmwrite(buffer, ds, enforce_file_format=True)
    return buffer.getvalue()


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
        Show a tqdm progress bar.

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
    if isinstance(n_studies, bool) or not isinstance(n_studies, int) or n_studies < 10:
        raise DataError(
            f"The 'n_studies' parameter of generate_ct_demo must be an int >= 10. Got {n_studies!r}."
        )
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise DataError(f"The 'seed' parameter of generate_ct_demo must be an int >= 0. Got {seed!r}.")
    out_dir = Path(out_dir)
    dicom_dir, labels_csv = out_dir / "dicom", out_dir / "labels.csv"
    for existing in (dicom_dir, labels_csv):
        if existing.exists():
            raise OutputError(
                f"{existing} already exists; generate_ct_demo does not overwrite. Choose an empty out_dir "
                "or delete the previous CT demo cohort."
            )
    try:
        dicom_dir.mkdir(parents=True)
    except OSError as exc:
        raise OutputError(f"Cannot create {dicom_dir}: {exc}. Choose a writable out_dir.") from exc

    n_unqualified = max(2, round(0.02 * n_studies))
    rng = np.random.default_rng([seed, 0xC70])
    rows, patients = _plan(rng, n_studies + n_unqualified, n_unqualified)
    counters = dict.fromkeys(range(len(SITES)), 0)
    studies: list[CtStudy] = []
    for i, row in enumerate(tqdm(rows, desc="CT demo studies", unit="study", disable=not progress)):
        counters[row.site] += 1
        folder = f"{SITES[row.site].key}/st{counters[row.site]:05d}"
        studies.append(_write_study(dicom_dir, folder, i, row, patients, seed, rng))

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["StudyInstanceUID", "label"])
    writer.writerows((s.study_uid, s.label) for s in studies)
    labels_csv.write_text(buffer.getvalue(), encoding="utf-8")

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
    (out_dir / "manifest.json").write_text(json.dumps(manifest.summary(), indent=2) + "\n", encoding="utf-8")
    logger.info(
        "Wrote %d CT demo studies (%d without a qualifying series), %d files, to %s",
        len(studies),
        n_unqualified,
        manifest.n_files,
        dicom_dir,
    )
    return manifest


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
    age = row.date.year - birth.year - ((row.date.month, row.date.day) < (birth.month, birth.day))
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

    # (role, series number, uid, description, kernel, image): the selected series first among axials.
    axial_role = "short" if row.kind is StudyKind.TOO_SHORT else "primary"
    primary_uid, secondary_uid = _uid(seed, "series", i, 2), _uid(seed, "series", i, 3)
    secondary_number = 3
    if row.kind is StudyKind.TIE_UID:
        primary_uid, secondary_uid = _ordered_pair(seed, i)  # the soft-kernel series gets the lower UID
        secondary_number = 2
    plan: list[tuple[str, int, str, str, str, tuple[SeriesImage, ...]]] = [
        ("localizer", 1, _uid(seed, "series", i, 1), scanner.localizer_description, "", sim.localizers),
        (axial_role, 2, primary_uid, scanner.primary.description, scanner.primary.kernel, (sim.primary,)),
    ]
    if sim.secondary is not None:
        plan.append(
            (
                "secondary",
                secondary_number,
                secondary_uid,
                scanner.secondary.description,
                scanner.secondary.kernel,
                (sim.secondary,),
            )
        )

    series_folders = rng.permutation(len(plan)) + 1
    written: list[CtSeries] = []
    for (role, number, uid, description, kernel, images), folder_no in zip(plan, series_folders, strict=True):
        localizer = role == "localizer"
        slices = [(im.geometry, k, im.stored[k]) for im in images for k in range(im.geometry.n_slices)]
        n = len(slices)
        file_numbers = rng.permutation(n) + 1  # names by counter, not in slice order
        reversed_numbers = scanner.reversed_instance_numbers and not localizer
        paths: list[str] = []
        for j, (geometry, k, stored) in enumerate(slices):
            header = SeriesHeader(
                series_uid=uid,
                series_number=number,
                description=description,
                kernel=kernel,
                localizer=localizer,
                orientation=geometry.orientation,
                pixel_spacing=geometry.pixel_spacing,
                thickness=geometry.thickness,
                series_time=row.time,
            )
            ds = build_slice(
                study,
                header,
                scanner=scanner,
                site=site,
                frame_of_reference_uid=frame_uid,
                sop_uid=_uid(seed, "instance", i, number, uid[-6:], j),
                instance_number=n - j if reversed_numbers else j + 1,
                position=geometry.positions[k],
                stored=stored,
            )
            relative = f"{folder}/se{folder_no}/IM{int(file_numbers[j]):05d}.dcm"
            path = dicom_dir / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(_encode(ds))
            paths.append(relative)
        written.append(CtSeries(uid, number, description, role, tuple(paths)))

    qualifying = [s for s in written if s.role in ("primary", "secondary") and s.n_slices >= MIN_SLICES]
    selected_uid = None
    if qualifying:
        selected = min(qualifying, key=lambda s: series_sort_key(s.n_slices, s.series_number, s.series_uid))
        if selected.role != "primary":  # pragma: no cover - the plan above guarantees it
            raise AssertionError(f"study {i}: the tie-break would select the {selected.role} series")
        selected_uid = selected.series_uid
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
