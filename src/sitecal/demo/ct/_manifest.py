"""What the CT demo generator wrote: the ground truth of each series and study, and the cohort manifest.

These records are for tests and checks; the pipeline must find all of it from the files themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .._files import manifest_summary
from ._study import StudyKind

__all__ = ["CtDemoManifest", "CtSeries", "CtStudy"]


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
        data = manifest_summary(self)
        data["kinds"] = {k.value: sum(s.kind == k for s in self.studies) for k in StudyKind}
        return data
