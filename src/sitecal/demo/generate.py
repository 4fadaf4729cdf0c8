"""Generate the demo cohort: synthetic multi-site chest DICOM studies, labels, and planted bad inputs.

The cohort shows the phenomenon sitecal exists for: the bundled model was trained on one scanner
(``scanner-1``, "Ysio Demo" at Northgate General Hospital) and is over-confident on the others, where
per-scanner temperature scaling lowers held-out ECE.

Layout written under ``out_dir``::

    dicom/site-1/s000001/IM00001.dcm     one instance per study; folder and file names are counters
    dicom/site-2/...
    labels.csv                            StudyInstanceUID,label
    manifest.json                         the DemoManifest summary (counts, scanners, planted problems)

Everything is drawn from ``numpy.random.default_rng`` streams seeded by ``seed`` (UIDs are hashes of the
seed and a counter), so the same seed gives byte-identical files.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray
from pydicom.uid import PYDICOM_ROOT_UID

from sitecal._progress import progress_bar

from ._cohort_plan import CohortPlan as _Plan
from ._cohort_plan import Planted as _Planted
from ._cohort_plan import draw_planted as _draw_planted
from ._cohort_plan import plan_cohort as _plan
from ._dicom import StudyHeader, build_dataset, presentation_values, window_of
from ._files import (
    check_cohort_arguments,
    demo_uid,
    encode,
    manifest_summary,
    prepare_out_dir,
    write_bytes,
    write_labels_csv,
    write_manifest_json,
)
from ._scanners import CLASS_NAMES, REFERENCE_SCANNER, SCANNERS, SITES, ScannerProfile, scanner_by_key
from ._synthesis import acquire, render_scenes, sample_anatomy

__all__ = ["DEMO_UID_ROOT", "DemoManifest", "DemoStudy", "generate_demo", "presentation_values"]

logger = logging.getLogger(__name__)

#: Root of every demo UID: pydicom's, followed by a hash of ("sitecal-demo", seed, kind, counter).
DEMO_UID_ROOT = PYDICOM_ROOT_UID

_CHUNK = 64  # studies synthesised per vectorised batch; fixed so that pixels do not depend on it


@dataclass(frozen=True)
class DemoStudy:
    """One generated study (ground truth for tests; the pipeline must find all this from the files).

    Attributes
    ----------
    relative_path : str
        Path of its file relative to ``dicom_dir``, POSIX separators.
    study_uid, patient_id : str
        StudyInstanceUID and PatientID written in the file.
    site, scanner : str
        InstitutionName and ManufacturerModelName written in the file.
    scanner_key : str
        Profile key (``"scanner-1"`` ...).
    label : str
        Class name.
    sex : str
        ``"M"`` or ``"F"``.
    age : int
        Age in years at the study.
    labelled : bool
        Whether ``labels.csv`` has a row for it.
    intact : bool
        False for the one study whose file is planted truncated.
    """

    relative_path: str
    study_uid: str
    patient_id: str
    site: str
    scanner: str
    scanner_key: str
    label: str
    sex: str
    age: int
    labelled: bool
    intact: bool


@dataclass(frozen=True)
class DemoManifest:
    """What :func:`generate_demo` wrote, including the bad inputs it planted on purpose.

    Attributes
    ----------
    dicom_dir : pathlib.Path
        Folder of the DICOM tree (``out_dir/dicom``).
    labels_csv : pathlib.Path
        The ground truth, columns ``StudyInstanceUID,label``.
    n_studies : int
        Studies with an intact file (the ``n_studies`` asked for); the truncated file's study is extra.
    n_patients : int
        Distinct patients among all written studies.
    n_files : int
        Every file under ``dicom_dir``: intact DICOM files, the truncated one and the non-DICOM ones.
    n_labels : int
        Rows of ``labels.csv``.
    class_names : tuple of str
        ``("normal", "nodule", "effusion")``, in logit order.
    scanners : tuple of str
        ManufacturerModelName of each scanner, in profile order.
    sites : tuple of str
        InstitutionName of each site.
    reference_scanner : str
        ManufacturerModelName of the scanner the bundled model was trained on.
    truncated_files : tuple of str
        Valid DICOM files cut in half (relative to ``dicom_dir``); the header is intact, Pixel Data is not.
    non_dicom_files : tuple of str
        Files that are not DICOM at all: a text file named ``.dcm`` and a binary file without extension.
    unlabelled_studies : tuple of str
        StudyInstanceUIDs of intact studies that have no row in ``labels.csv``.
    orphan_labels : tuple of str
        StudyInstanceUIDs in ``labels.csv`` that match no file.
    studies : tuple of DemoStudy
        Every written DICOM study, the truncated one included (``intact=False``).
    seed : int
        The seed everything was drawn from.
    """

    dicom_dir: Path
    labels_csv: Path
    n_studies: int
    n_patients: int
    n_files: int
    n_labels: int
    class_names: tuple[str, ...]
    scanners: tuple[str, ...]
    sites: tuple[str, ...]
    reference_scanner: str
    truncated_files: tuple[str, ...]
    non_dicom_files: tuple[str, ...]
    unlabelled_studies: tuple[str, ...]
    orphan_labels: tuple[str, ...]
    studies: tuple[DemoStudy, ...]
    seed: int

    def summary(self) -> dict[str, object]:
        """JSON-ready summary, without the per-study list (what ``manifest.json`` holds)."""
        return manifest_summary(self)


def _uid(seed: int, kind: str, index: int) -> str:
    return demo_uid("sitecal-demo", seed, kind, index)


def _pixel_chunks(
    seed: int, plan: _Plan, n: int
) -> Iterator[tuple[int, NDArray[np.uint16], NDArray[np.float64]]]:
    """Yield (start, stored pixels, windows (B, 2)) of studies start..start+B, in chunks of ``_CHUNK``."""
    # Anatomy is a function of the patient alone (its own stream), so studies of a patient share it.
    anatomy_of_patient = sample_anatomy(np.random.default_rng([seed, 0xA7]), plan.patient_sex)
    for chunk, start in enumerate(range(0, n, _CHUNK)):
        stop = min(start + _CHUNK, n)
        rng = np.random.default_rng([seed, 0x5CA1, chunk])
        idx = np.arange(start, stop)
        scenes = render_scenes(rng, plan.label[idx], anatomy_of_patient.take(plan.patient[idx]))
        stored = np.empty(scenes.shape, dtype=np.uint16)
        windows = np.empty((len(idx), 2), dtype=np.float64)
        for s_index, scanner in enumerate(SCANNERS):
            members = np.flatnonzero(plan.scanner[idx] == s_index)
            if members.size:
                stored[members] = acquire(scenes[members], scanner, rng)
                center, width = window_of(stored[members], scanner)
                windows[members, 0], windows[members, 1] = center, width
        yield start, stored, windows


def generate_demo(
    out_dir: Path, *, n_studies: int = 2000, seed: int = 0, progress: bool = False
) -> DemoManifest:
    """Write the synthetic multi-site demo cohort under ``out_dir``.

    Parameters
    ----------
    out_dir : pathlib.Path
        Output folder; created if needed. It must not already hold a ``dicom`` folder or ``labels.csv``
        (nothing is overwritten).
    n_studies : int, default 2000
        Number of intact studies (one DICOM instance each). One more study is written truncated.
        Must be at least 10, so that every planted problem has somewhere to go.
    seed : int, default 0
        Seed of every random choice: same seed, byte-identical files.
    progress : bool, default False
        Show a progress bar.

    Returns
    -------
    DemoManifest
        Paths, counts, scanners, sites, and the planted bad inputs.

    Raises
    ------
    DataError
        If ``n_studies`` or ``seed`` is out of range.
    OutputError
        If ``out_dir`` already holds a demo cohort or cannot be written.

    Examples
    --------
    >>> import tempfile
    >>> manifest = generate_demo(Path(tempfile.mkdtemp()), n_studies=20, seed=1)
    >>> manifest.n_studies, len(manifest.truncated_files), len(manifest.non_dicom_files)
    (20, 1, 2)
    """
    check_cohort_arguments("generate_demo", n_studies, seed)
    out_dir = Path(out_dir)
    dicom_dir, labels_csv = prepare_out_dir(out_dir, function="generate_demo", cohort="demo cohort")

    rng = np.random.default_rng([seed, 0x91A4])
    plan = _plan(rng, n_studies + 1)  # the last study is the one written truncated
    planted = _draw_planted(rng, n_studies)

    studies = _write_studies(dicom_dir, plan, seed, planted, progress=progress)
    truncated_path, text_dcm, binary_junk = _plant_bad_files(dicom_dir, plan, studies, planted, seed)

    orphan_uid = _uid(seed, "orphan-study", 0)
    rows = [(s.study_uid, s.label) for s in studies if s.labelled]
    rows.insert(planted.orphan_position, (orphan_uid, CLASS_NAMES[int(rng.integers(0, len(CLASS_NAMES)))]))
    write_labels_csv(labels_csv, rows)

    manifest = DemoManifest(
        dicom_dir=dicom_dir,
        labels_csv=labels_csv,
        n_studies=n_studies,
        n_patients=len({s.patient_id for s in studies}),
        n_files=sum(1 for p in dicom_dir.rglob("*") if p.is_file()),
        n_labels=len(rows),
        class_names=CLASS_NAMES,
        scanners=tuple(s.model_name for s in SCANNERS),
        sites=tuple(s.institution_name for s in SITES),
        reference_scanner=scanner_by_key(REFERENCE_SCANNER).model_name,
        truncated_files=(truncated_path,),
        non_dicom_files=(text_dcm, binary_junk),
        unlabelled_studies=(studies[planted.unlabelled].study_uid,),
        orphan_labels=(orphan_uid,),
        studies=tuple(studies),
        seed=seed,
    )
    write_manifest_json(out_dir, manifest.summary())
    logger.info(
        "Wrote %d demo studies of %d patients (%d files) to %s",
        n_studies,
        manifest.n_patients,
        manifest.n_files,
        dicom_dir,
    )
    return manifest


def _write_studies(
    dicom_dir: Path, plan: _Plan, seed: int, planted: _Planted, *, progress: bool
) -> list[DemoStudy]:
    """Write every study of ``plan`` (one instance each), chunk by chunk, and describe each one."""
    n_total = len(plan.folder)
    studies: list[DemoStudy] = []
    with progress_bar(total=n_total, desc="demo studies", unit="study", disable=not progress) as bar:
        for start, stored, windows in _pixel_chunks(seed, plan, n_total):
            for offset in range(stored.shape[0]):
                i = start + offset
                window = (float(windows[offset, 0]), float(windows[offset, 1]))
                studies.append(
                    _write_study(
                        dicom_dir,
                        plan,
                        i,
                        stored[offset],
                        window,
                        seed,
                        labelled=i != planted.unlabelled,
                        intact=i != planted.truncated,
                    )
                )
            bar.update(stored.shape[0])
    return studies


def _plant_bad_files(
    dicom_dir: Path, plan: _Plan, studies: list[DemoStudy], planted: _Planted, seed: int
) -> tuple[str, str, str]:
    """Cut one study's file in half and add two non-DICOM files; return the three relative paths.

    The text file is named like an instance (``IM00002.dcm``); the binary one has no extension.
    """
    truncated = studies[planted.truncated].relative_path
    full = (dicom_dir / truncated).read_bytes()
    (dicom_dir / truncated).write_bytes(full[: len(full) // 2])

    text_dcm = f"{plan.folder[int(planted.junk_folders[0])]}/IM00002.dcm"
    write_bytes(
        dicom_dir / text_dcm,
        b"Export log of a PACS workstation.\nThis file is not DICOM although its name ends in .dcm.\n",
    )
    binary_junk = f"{plan.folder[int(planted.junk_folders[1])]}/IM00002"
    write_bytes(dicom_dir / binary_junk, np.random.default_rng([seed, 0xB1]).bytes(1024))
    return truncated, text_dcm, binary_junk


def _write_study(
    dicom_dir: Path,
    plan: _Plan,
    i: int,
    stored: NDArray[np.uint16],
    window: tuple[float, float],
    seed: int,
    *,
    labelled: bool,
    intact: bool,
) -> DemoStudy:
    scanner: ScannerProfile = SCANNERS[int(plan.scanner[i])]
    site = SITES[int(plan.site[i])]
    p = int(plan.patient[i])
    header = StudyHeader(
        patient_id=plan.patient_id[p],
        patient_name=f"DEMO^P{p + 1:06d}",
        birth_date=plan.patient_birth[p].strftime("%Y%m%d"),
        sex=str(plan.patient_sex[p]),
        age=f"{int(plan.age[i]):03d}Y",
        study_date=plan.date[i].strftime("%Y%m%d"),
        study_time=plan.time[i],
        accession=plan.accession[i],
        study_uid=_uid(seed, "study", i),
        series_uid=_uid(seed, "series", i),
        sop_uid=_uid(seed, "instance", i),
        study_id=str(i + 1),
        series_number=1,
        instance_number=1,
    )
    relative = f"{plan.folder[i]}/IM00001.dcm"
    write_bytes(dicom_dir / relative, encode(build_dataset(header, stored, scanner, site, window=window)))
    return DemoStudy(
        relative_path=relative,
        study_uid=header.study_uid,
        patient_id=header.patient_id,
        site=site.institution_name,
        scanner=scanner.model_name,
        scanner_key=scanner.key,
        label=CLASS_NAMES[int(plan.label[i])],
        sex=header.sex,
        age=int(plan.age[i]),
        labelled=labelled,
        intact=intact,
    )
