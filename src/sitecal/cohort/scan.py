"""Walk a folder and read DICOM headers (never pixel data), in parallel, turning bad files into exclusions.

The folder may be hostile or messy: only regular files are read (FIFOs, sockets, devices and symbolic
links that leave the folder are excluded unopened), folder links are not followed (no walk can loop), an
unreadable subfolder is an exclusion, each read has a time limit, and an image declaring more pixel values
than a limit, or whose decoding would hold more memory than the limit buys, is excluded before anything
decodes it. A deflated file's header is inflated up to its pixel data only. pydicom's warnings, which quote
UIDs, are captured and only counted (:func:`sitecal._dicomfile.quiet_pydicom`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from tqdm import tqdm

from sitecal._dicomfile import (
    open_regular,
    quiet_pydicom,
)
from sitecal._progress import progress_bar
from sitecal._text import plural
from sitecal.cohort._header import (
    DEFAULT_MAX_PIXELS_PER_IMAGE,
    REQUIRED_KEYWORDS,
    Unusable,
    read_header,
    read_values,
    render_value,
)
from sitecal.cohort._records import Exclusion
from sitecal.cohort._walk import unreadable_folder_reason, walk
from sitecal.errors import DataError

__all__ = [
    "DEFAULT_MAX_PIXELS_PER_IMAGE",
    "DEFAULT_READ_TIMEOUT_S",
    "REQUIRED_KEYWORDS",
    "InstanceHeader",
    "ScanResult",
    "Unusable",
    "read_header",
    "render_value",
    "scan_folder",
    "unreadable_folder_reason",
]

logger = logging.getLogger(__name__)

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
    "Rows",
    "Columns",
    "SamplesPerPixel",
    "Modality",
    "StudyDate",
    "PatientBirthDate",
    "InstitutionName",
    "Manufacturer",
    "ManufacturerModelName",
)
#: Seconds one header read may take before the file is excluded (a hung network share, not a slow disk).
DEFAULT_READ_TIMEOUT_S = 60.0
_CHUNK = 32


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
    """Instances found under a folder and the entries that could not be used.

    ``files_found`` counts every entry the walk met (regular files, links, FIFOs and other special files,
    unreadable folders): it equals ``len(instances) + len(exclusions)``.
    """

    root: Path
    files_found: int
    instances: tuple[InstanceHeader, ...]
    exclusions: tuple[Exclusion, ...]


@dataclass(frozen=True)
class _Limits:
    max_pixels_per_image: int
    read_timeout_s: float | None
    transform_multiple: float = 1.0


#: One file's outcome and the value-free kinds of what pydicom said while reading it.
_Outcome = tuple["dict[str, str] | Unusable", tuple[str, ...]]


def scan_folder(
    root: Path,
    keywords: Iterable[str] = (),
    *,
    workers: int | None = None,
    progress: bool = False,
    max_pixels_per_image: int = DEFAULT_MAX_PIXELS_PER_IMAGE,
    read_timeout_s: float | None = DEFAULT_READ_TIMEOUT_S,
    only: Collection[Path] | None = None,
    transform_multiple: float = 1.0,
) -> ScanResult:
    """Read the header of every file under ``root``.

    Parameters
    ----------
    root : Path
        Folder searched recursively; hidden files and folders (``.name``) are skipped. Symbolic links to
        regular files inside ``root`` are read; links to folders are not followed (their files are read
        where they are); links leaving ``root``, dangling links, FIFOs, sockets and devices are excluded
        without being opened.
    keywords : iterable of str
        DICOM keywords to keep besides :data:`BASE_KEYWORDS` (the protocol's subgroup tags).
    workers : int, optional
        Processes reading headers; default ``min(4, os.cpu_count())``; 1 reads in this process.
    progress : bool
        Show a progress bar.
    max_pixels_per_image : int
        Largest Rows x Columns x NumberOfFrames x SamplesPerPixel admitted; default
        :data:`DEFAULT_MAX_PIXELS_PER_IMAGE` (2**28 values, 1 GiB as float32). It also bounds the memory
        decoding an image may hold, at 6 bytes a value (:func:`sitecal._dicomfile.decode_cost`).
    read_timeout_s : float or None
        Seconds one file's header read may take before the file is excluded; default
        :data:`DEFAULT_READ_TIMEOUT_S`; ``None`` waits for ever. A read stuck in the kernel (a hard-mounted
        share that never answers) keeps its thread until the share answers, but the scan goes on.
    only : collection of Path, optional
        Paths relative to ``root``: read these files and ignore the others (a PACS store holds more than
        the query's complete studies).
    transform_multiple : float
        What the protocol's transforms hold while an image has its loaded size, in float32 images
        (:func:`sitecal.inference.transforms.loaded_size_multiple`; 1, the default, for none): counted in
        the image's memory budget as the reader counts it, so that the scan admits what the reader reads.

    Returns
    -------
    ScanResult
        Instances sorted by path, and one :class:`Exclusion` per entry that is not a usable DICOM image,
        with its reason. An SOPInstanceUID found in several files is kept once (the first path); every
        other file with it is an exclusion, as an identical copy or as a UID clash (different content).

    Raises
    ------
    DataError
        If ``root`` is not a readable folder, or a limit is not positive.
    """
    _check_folder_and_limits(root, max_pixels_per_image, read_timeout_s)
    entries = sorted(walk(root))
    if only is not None:
        wanted_paths = set(only)
        entries = [(path, problem) for path, problem in entries if path.relative_to(root) in wanted_paths]
    paths = [path for path, problem in entries if problem is None]
    wanted = tuple(dict.fromkeys([*BASE_KEYWORDS, *keywords]))
    limits = _Limits(max_pixels_per_image, read_timeout_s, _checked_multiple(transform_multiple))
    n_workers = max(1, min(workers or min(4, os.cpu_count() or 1), len(paths) // _CHUNK + 1))
    with progress_bar(
        total=len(paths), desc="Reading DICOM headers", unit="file", disable=not progress
    ) as bar:
        outcomes = dict(zip(paths, _read_all(paths, wanted, limits, n_workers, bar), strict=True))
    instances, exclusions, said = _sort_out(root, entries, outcomes)
    _log_summary(entries, exclusions, instances, said)
    return ScanResult(
        root=root, files_found=len(entries), instances=tuple(instances), exclusions=tuple(exclusions)
    )


def _check_folder_and_limits(root: Path, max_pixels_per_image: int, read_timeout_s: float | None) -> None:
    """Refuse a DICOM folder that is not a folder, and a pixel or time limit that is not positive."""
    if not root.is_dir():
        raise DataError(f"{root}: DICOM folder not found. Check data.dicom_dir in the protocol.")
    limit = max_pixels_per_image
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise DataError(
            f"The 'max_pixels_per_image' parameter of scan_folder must be an int >= 1. Got {limit!r}."
        )
    if read_timeout_s is not None and not read_timeout_s > 0:
        raise DataError(
            "The 'read_timeout_s' parameter of scan_folder must be a number > 0 or None. "
            f"Got {read_timeout_s!r}."
        )


def _checked_multiple(transform_multiple: float) -> float:
    """The transforms' memory multiple as a float, refused outside [1, 1024]."""
    if isinstance(transform_multiple, bool) or not (
        isinstance(transform_multiple, int | float) and 1 <= transform_multiple <= 1024
    ):
        raise DataError(
            "The 'transform_multiple' parameter of scan_folder must be a number from 1 to 1024. "
            f"Got {transform_multiple!r}."
        )
    return float(transform_multiple)


def _sort_out(
    root: Path, entries: list[tuple[Path, str | None]], outcomes: dict[Path, _Outcome]
) -> tuple[list[InstanceHeader], list[Exclusion], Counter[str]]:
    """The instances read, an exclusion per other entry, and what pydicom said, in the order of ``entries``.

    An entry the walk did not read, or whose header is unusable, is an exclusion; so is a file whose
    SOPInstanceUID an earlier file has (:func:`_duplicate_reason`).
    """
    instances: list[InstanceHeader] = []
    exclusions: list[Exclusion] = []
    seen: dict[str, Path] = {}
    digests: dict[Path, bytes] = {}  # of files met in duplicate checks, each read once
    said: Counter[str] = Counter()
    for path, problem in entries:
        relative = path.relative_to(root)
        outcome: dict[str, str] | Unusable = Unusable(problem) if problem else outcomes[path][0]
        said.update(() if problem else outcomes[path][1])
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
    return instances, exclusions, said


def _log_summary(
    entries: list[tuple[Path, str | None]],
    exclusions: list[Exclusion],
    instances: list[InstanceHeader],
    said: Counter[str],
) -> None:
    """Log counts only: paths and pydicom's messages may hold identifiers (names in folder names, UIDs)."""
    logger.info(
        "scanned %d %s: %d %s, %d excluded",
        len(entries),
        plural(len(entries), "file"),
        len(instances),
        plural(len(instances), "instance"),
        len(exclusions),
    )
    folders = sum(1 for e in exclusions if e.reason.startswith("unreadable folder"))
    if folders:
        logger.warning(
            "%d folder(s) under data.dicom_dir could not be read, so their files were not scanned; they are "
            "listed in exclusions.csv. Give the account running sitecal read access to include them.",
            folders,
        )
    timed_out = sum(1 for e in exclusions if e.reason.startswith("header read timed out"))
    if timed_out:
        logger.warning(
            "%d file(s) under data.dicom_dir did not answer within the read time limit and were excluded; "
            "check the storage they are on.",
            timed_out,
        )
    if said:
        logger.info(
            "pydicom reported %d %s it worked around while reading headers (values withheld): %s",
            sum(said.values()),
            plural(sum(said.values()), "problem"),
            "; ".join(f"{kind} (x{n})" for kind, n in said.most_common()),
        )


def _read_all(
    paths: list[Path], keywords: tuple[str, ...], limits: _Limits, workers: int, bar: tqdm
) -> Iterator[_Outcome]:
    task = partial(_read_entry, keywords=keywords, limits=limits)
    if workers == 1:
        for path in paths:
            yield task(path)
            bar.update()
        return
    # each worker bounds its own reads (_read_entry), so the pool always drains and its processes are
    # joined when the block ends: none is left behind
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for outcome in pool.map(task, paths, chunksize=_CHUNK):
            yield outcome
            bar.update()


def _read_entry(path: Path, keywords: tuple[str, ...], limits: _Limits) -> _Outcome:
    """Read one header under the time limit.

    The read runs in a daemon thread that is abandoned when it overruns: a read blocked on a hung share
    cannot be interrupted from Python, but it must not hold up the other files or, being a daemon, the
    process's exit.
    """
    if limits.read_timeout_s is None:
        return _read(path, keywords, limits)
    box: list[_Outcome] = []

    def target() -> None:
        try:
            box.append(_read(path, keywords, limits))
        except BaseException as exc:  # a thread's exception would otherwise be lost
            box.append((Unusable(f"unreadable file ({type(exc).__name__})"), ()))

    thread = threading.Thread(target=target, name="sitecal-header-read", daemon=True)
    thread.start()
    thread.join(limits.read_timeout_s)
    if box:
        return box[0]
    return Unusable(f"header read timed out after {limits.read_timeout_s:g} s"), ()


def _read(path: Path, keywords: Sequence[str], limits: _Limits) -> _Outcome:
    with quiet_pydicom() as notes:
        outcome = read_values(path, keywords, limits.max_pixels_per_image, limits.transform_multiple)
    return outcome, tuple(notes.kinds())


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
    try:
        with open_regular(path) as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    except OSError:  # gone, unreadable or replaced since its header was read: it cannot be shown a copy
        return b"unreadable: " + bytes(path)
    return digest.digest()
