"""Walk a folder and read DICOM headers (never pixel data), in parallel, turning bad files into exclusions."""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pydicom
from pydicom.tag import Tag
from pydicom.uid import DeflatedExplicitVRLittleEndian
from tqdm import tqdm

from sitecal._dicomfile import NotDicom, open_dicom
from sitecal.cohort._records import Exclusion
from sitecal.errors import DataError

__all__ = ["REQUIRED_KEYWORDS", "InstanceHeader", "ScanResult", "Unusable", "read_header", "scan_folder"]

logger = logging.getLogger(__name__)

#: Header fields every instance must have to enter the cohort.
REQUIRED_KEYWORDS = ("SOPInstanceUID", "StudyInstanceUID")
#: Header fields always read (besides the protocol's subgroup tags).
BASE_KEYWORDS = (
    "SOPInstanceUID",
    "SOPClassUID",
    "StudyInstanceUID",
    "SeriesInstanceUID",
    "PatientID",
    "AccessionNumber",
    "InstanceNumber",
    "SeriesNumber",
    "SeriesDescription",
    "BodyPartExamined",
    "NumberOfFrames",
    "Modality",
    "StudyDate",
    "PatientBirthDate",
    "InstitutionName",
    "Manufacturer",
    "ManufacturerModelName",
)
_CHUNK = 32


@dataclass(frozen=True)
class Unusable:
    """Why a file cannot be used, and its StudyInstanceUID when the header could be read."""

    reason: str
    study_instance_uid: str | None = None


@dataclass(frozen=True)
class InstanceHeader:
    """What the scan keeps of one readable DICOM instance (values as text, identifiers still in clear)."""

    path: Path
    values: dict[str, str]

    @property
    def sop_instance_uid(self) -> str:
        """The instance's SOPInstanceUID."""
        return self.values["SOPInstanceUID"]

    @property
    def study_instance_uid(self) -> str:
        """The instance's StudyInstanceUID."""
        return self.values["StudyInstanceUID"]


@dataclass(frozen=True)
class ScanResult:
    """Instances found under a folder and the files that could not be used."""

    root: Path
    files_found: int
    instances: tuple[InstanceHeader, ...]
    exclusions: tuple[Exclusion, ...]


def scan_folder(
    root: Path,
    keywords: Iterable[str] = (),
    *,
    workers: int | None = None,
    progress: bool = False,
) -> ScanResult:
    """Read the header of every file under ``root``.

    Parameters
    ----------
    root : Path
        Folder searched recursively; hidden files and folders (``.name``) are skipped.
    keywords : iterable of str
        DICOM keywords to keep besides :data:`BASE_KEYWORDS` (the protocol's subgroup tags).
    workers : int, optional
        Processes reading headers; default ``min(4, os.cpu_count())``; 1 reads in this process.
    progress : bool
        Show a progress bar.

    Returns
    -------
    ScanResult
        Instances sorted by path, and one :class:`Exclusion` per file that is not a usable DICOM image,
        with its reason. An SOPInstanceUID found in several files is kept once (the first path); every
        other file with it is an exclusion, as an identical copy or as a UID clash (different content).
    """
    if not root.is_dir():
        raise DataError(f"{root}: DICOM folder not found. Check data.dicom_dir in the protocol.")
    paths = sorted(_walk(root))
    wanted = tuple(dict.fromkeys([*BASE_KEYWORDS, *keywords]))
    n_workers = max(1, min(workers or min(4, os.cpu_count() or 1), len(paths) // _CHUNK + 1))
    with tqdm(total=len(paths), desc="Reading DICOM headers", unit="file", disable=not progress) as bar:
        if n_workers == 1:
            outcomes = []
            for path in paths:
                outcomes.append(read_header(path, wanted))
                bar.update()
        else:
            with ProcessPoolExecutor(max_workers=n_workers) as pool:
                outcomes = []
                for outcome in pool.map(read_header, paths, [wanted] * len(paths), chunksize=_CHUNK):
                    outcomes.append(outcome)
                    bar.update()
    instances: list[InstanceHeader] = []
    exclusions: list[Exclusion] = []
    seen: dict[str, Path] = {}
    digests: dict[Path, bytes] = {}  # of files met in duplicate checks, each read once
    for path, outcome in zip(paths, outcomes, strict=True):
        relative = path.relative_to(root)
        if isinstance(outcome, Unusable):
            exclusions.append(
                Exclusion(
                    stage="scan",
                    reason=outcome.reason,
                    path=relative,
                    study_uid=outcome.study_instance_uid,
                    unit="file",
                )
            )
        elif outcome["SOPInstanceUID"] in seen:
            exclusions.append(
                Exclusion(
                    stage="scan",
                    reason=_duplicate_reason(path, seen[outcome["SOPInstanceUID"]], digests),
                    path=relative,
                    study_uid=outcome.get("StudyInstanceUID"),
                    unit="file",
                )
            )
        else:
            seen[outcome["SOPInstanceUID"]] = path
            instances.append(InstanceHeader(path=path, values=outcome))
    logger.info("scanned %d files: %d instances, %d excluded", len(paths), len(instances), len(exclusions))
    return ScanResult(
        root=root, files_found=len(paths), instances=tuple(instances), exclusions=tuple(exclusions)
    )


def _duplicate_reason(path: Path, kept: Path, digests: dict[Path, bytes]) -> str:
    """Why a second file with an SOPInstanceUID already seen is excluded: a copy, or a UID clash."""
    for file in (path, kept):
        if file not in digests:
            digests[file] = _digest(file)
    if digests[path] == digests[kept]:
        return "duplicate file: identical copy of an instance already in the cohort"
    return (
        "duplicate SOPInstanceUID with different content: the first file by path is kept; "
        "check the export for re-used UIDs"
    )


def _digest(path: Path) -> bytes:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.digest()


def _walk(root: Path) -> Iterable[Path]:
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            if not name.startswith("."):
                yield Path(folder) / name


def read_header(path: Path, keywords: Sequence[str]) -> dict[str, str] | Unusable:
    """Read one file's header; return the wanted values as text, or why it cannot be used.

    Pixel data is not read: large values are deferred, and a declared pixel-data length that runs past the
    end of the file marks the file as truncated. Files without preamble or File Meta Information are read
    (:func:`sitecal._dicomfile.open_dicom`).
    """
    try:
        ds = open_dicom(path, defer_size=1024)
    except NotDicom:
        return Unusable("not a DICOM file")
    except (EOFError, OSError) as exc:
        return Unusable(
            "truncated file"
            if isinstance(exc, EOFError)
            else f"unreadable file ({exc.strerror or type(exc).__name__})"
        )
    except Exception as exc:  # pydicom raises many types on corrupt input; each becomes a reason
        return Unusable(f"corrupt DICOM header ({type(exc).__name__})")
    if path.name.upper() == "DICOMDIR" or "DirectoryRecordSequence" in ds:
        return Unusable("DICOMDIR media directory, not an image")
    if not any(tag in ds for tag in (0x7FE00010, 0x7FE00008, 0x7FE00009)):
        return Unusable("no pixel data (not an image)", _text(ds, "StudyInstanceUID"))
    raw = ds._dict.get(Tag(0x7FE00010)) if 0x7FE00010 in ds else None
    length = getattr(raw, "length", None)
    tell = getattr(raw, "value_tell", None)
    deflated = ds.file_meta.get("TransferSyntaxUID") == DeflatedExplicitVRLittleEndian
    if (
        not deflated  # offsets are then into the inflated stream
        and length is not None
        and tell is not None
        and length != 0xFFFFFFFF
        and tell + length > path.stat().st_size
    ):
        return Unusable("truncated file", _text(ds, "StudyInstanceUID"))
    bad = _image_module_problem(ds)
    if bad:
        return Unusable(bad, _text(ds, "StudyInstanceUID"))
    values: dict[str, str] = {}
    for keyword in keywords:
        try:
            value = ds.get(keyword)
        except Exception:  # a malformed value of one tag
            return Unusable(f"malformed value in tag {keyword}", _text(ds, "StudyInstanceUID"))
        if value is not None and str(value).strip():
            values[keyword] = str(value).strip()
    missing = [k for k in REQUIRED_KEYWORDS if k not in values]
    if missing:
        return Unusable(f"missing required tag {missing[0]}")
    return values


#: Image Pixel module attributes (PS3.3 C.7.6.3) that decoding depends on; Rows and Columns are required.
_IMAGE_MODULE = (
    "Rows",
    "Columns",
    "SamplesPerPixel",
    "BitsAllocated",
    "BitsStored",
    "PixelRepresentation",
    "NumberOfFrames",
)


def _image_module_problem(ds: pydicom.Dataset) -> str | None:
    """Why the image's pixel description cannot be used, or ``None``."""
    if "PixelData" not in ds:  # float pixel data has no Rows/Columns constraints worth checking here
        return None
    for keyword in _IMAGE_MODULE:
        try:
            value = ds.get(keyword)
            number = None if value in (None, "") else int(value)
        except (TypeError, ValueError):
            return f"malformed value in tag {keyword} (not an integer)"
        except Exception:  # a value pydicom cannot even parse
            return f"malformed value in tag {keyword}"
        if number is None and keyword in ("Rows", "Columns"):
            return f"missing required tag {keyword} of an image"
        if number is not None and number < (1 if keyword != "PixelRepresentation" else 0):
            return f"implausible value in tag {keyword} ({number})"
    return None


def _text(ds: pydicom.Dataset, keyword: str) -> str | None:
    try:
        value = str(ds.get(keyword, "")).strip()
    except Exception:  # a malformed value
        return None
    return value or None
