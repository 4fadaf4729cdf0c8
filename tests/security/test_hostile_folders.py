"""The header scan on hostile and messy folders: nothing hangs, nothing is lost, nothing leaks.

Every entry of data.dicom_dir ends as an instance or as an exclusion with its specific reason, and
``files_found`` counts them all: FIFOs, devices and links leaving the folder are excluded unopened, folder
links cannot make the walk loop, an unreadable subfolder is an exclusion, a hung read is cut off, an image
declaring a huge pixel count is refused before decoding, and pydicom's warnings (which quote UIDs and
paths) reach neither stderr nor a log.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pydicom
import pytest
from pydicom.data import get_testdata_file
from pydicom.dataset import FileMetaDataset
from pydicom.uid import ExplicitVRLittleEndian, SecondaryCaptureImageStorage

import sitecal.cohort._header as header
import sitecal.cohort.scan as scan
from sitecal._dicomfile import NotRegularFile, open_dicom, quiet_pydicom
from sitecal.cohort.scan import (
    DEFAULT_MAX_PIXELS_PER_IMAGE,
    ScanResult,
    read_header,
    render_value,
    scan_folder,
    unreadable_folder_reason,
)
from sitecal.errors import DataError

OUTSIDE = "symbolic link pointing outside data.dicom_dir (not followed)"
FOLDER_LINK = "symbolic link to a folder (not followed: its files are read where they are)"
#: An identifier a site might put in a UID, and one in a folder name: neither may reach stderr or a log.
PLANTED_UID = "1.2.826.0.1.3680043.8.498.MRN7777777"
PLANTED_FOLDER = "DOE^JANE_19650304"


def _image(path: Path, n: int, *, rows: int = 4, columns: int = 4, **values: object) -> Path:
    """A small valid Secondary Capture image with SOPInstanceUID ending in ``n``."""
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = SecondaryCaptureImageStorage
    meta.MediaStorageSOPInstanceUID = f"1.2.826.0.1.3680043.8.498.10.{n}"
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = pydicom.Dataset()
    ds.file_meta = meta
    ds.SOPClassUID, ds.SOPInstanceUID = meta.MediaStorageSOPClassUID, meta.MediaStorageSOPInstanceUID
    ds.StudyInstanceUID = f"1.2.826.0.1.3680043.8.498.20.{n}"
    ds.Modality = "OT"
    ds.Rows, ds.Columns = rows, columns
    ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 8, 8, 7, 0
    ds.PixelData = np.arange(16, dtype=np.uint8).tobytes()  # the real payload stays small
    with warnings.catch_warnings(), pydicom.config.disable_value_validation():
        warnings.simplefilter("ignore")  # planted invalid values are the point
        for keyword, value in values.items():
            setattr(ds, keyword, value)
        path.parent.mkdir(parents=True, exist_ok=True)
        ds.save_as(path, enforce_file_format=True)
    return path


def _reasons(result: ScanResult) -> dict[str, str]:
    return {str(e.path): e.reason for e in result.exclusions}


def _accounted(result: ScanResult, n_entries: int) -> None:
    """Every entry met is an instance or an exclusion, and files_found counts them all."""
    assert result.files_found == n_entries
    assert len(result.instances) + len(result.exclusions) == n_entries


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "dicom"
    _image(folder / "good.dcm", 1)
    return folder


@pytest.mark.timeout(20)
def test_a_fifo_named_dcm_is_excluded_without_being_opened(root: Path) -> None:
    os.mkfifo(root / "x.dcm")  # no writer: opening it for reading would block for ever
    result = scan_folder(root, workers=1)
    assert _reasons(result) == {"x.dcm": "not a regular file (FIFO)"}
    assert [i.path.name for i in result.instances] == ["good.dcm"]
    _accounted(result, 2)
    # the reader's door refuses it too, at once, should a file be swapped for a FIFO after the scan
    with pytest.raises(NotRegularFile, match=r"^not a regular file \(FIFO\)$"):
        open_dicom(root / "x.dcm")
    assert read_header(root / "x.dcm", ["Modality"]) == scan.Unusable("not a regular file (FIFO)")


@pytest.mark.timeout(20)
def test_a_socket_is_excluded_without_being_opened(root: Path) -> None:
    import socket

    assert len(str(root / "s.dcm")) < 100  # AF_UNIX paths are limited to about 100 bytes
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(root / "s.dcm"))
        result = scan_folder(root, workers=1)
    assert _reasons(result) == {"s.dcm": "not a regular file (socket)"}
    _accounted(result, 2)


@pytest.mark.timeout(20)
def test_a_link_to_dev_zero_is_excluded_and_the_device_itself_is_refused(root: Path) -> None:
    (root / "zero.dcm").symlink_to("/dev/zero")  # read would never end
    result = scan_folder(root, workers=1)
    assert _reasons(result) == {"zero.dcm": OUTSIDE}
    _accounted(result, 2)
    assert read_header(Path("/dev/zero"), ["Modality"]) == scan.Unusable(
        "not a regular file (character device)"
    )


@pytest.mark.timeout(20)
def test_links_out_of_the_root_dangling_and_looping_are_excluded(root: Path, tmp_path: Path) -> None:
    elsewhere = _image(tmp_path / "elsewhere" / "other.dcm", 2)
    (root / "out.dcm").symlink_to(elsewhere)  # a valid DICOM file, but outside data.dicom_dir
    (root / "outdir").symlink_to(elsewhere.parent, target_is_directory=True)
    (root / "gone.dcm").symlink_to(root / "missing.dcm")
    (root / "self.dcm").symlink_to(root / "self.dcm")
    result = scan_folder(root, workers=1)
    assert _reasons(result) == {
        "out.dcm": OUTSIDE,
        "outdir": OUTSIDE,
        "gone.dcm": "dangling symbolic link (its target does not exist)",
        "self.dcm": "symbolic link loop (not followed)",
    }
    assert [i.path.name for i in result.instances] == ["good.dcm"]
    _accounted(result, 5)


@pytest.mark.timeout(20)
def test_folder_links_cannot_make_the_walk_loop(root: Path) -> None:
    sub = root / "a" / "b"
    _image(sub / "deep.dcm", 2)
    (sub / "up").symlink_to(root, target_is_directory=True)  # root/a/b/up/a/b/up/... for ever if followed
    (root / "a" / "again").symlink_to(sub, target_is_directory=True)
    (root / "link.dcm").symlink_to(sub / "deep.dcm")  # a file link inside the root is read
    result = scan_folder(root, workers=1)
    assert _reasons(result) == {
        "a/again": FOLDER_LINK,
        "a/b/up": FOLDER_LINK,
        "link.dcm": "duplicate file: identical copy of an instance already in the cohort",
    }
    assert sorted(str(i.path.relative_to(root)) for i in result.instances) == ["a/b/deep.dcm", "good.dcm"]
    _accounted(result, 5)


@pytest.mark.timeout(20)
def test_an_unreadable_subfolder_is_an_exclusion_and_counted(
    root: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # the tests run as root, whom chmod 000 does not stop: the refusal is made where the walk lists a folder
    locked = root / PLANTED_FOLDER
    _image(locked / "hidden.dcm", 2)
    listing = os.scandir

    def scandir(path: os.PathLike[str] | str) -> object:
        if Path(path) == locked:
            raise PermissionError(13, "Permission denied", str(path))
        return listing(path)

    monkeypatch.setattr(os, "scandir", scandir)
    with caplog.at_level(logging.INFO):
        result = scan_folder(root, workers=1)
    assert _reasons(result) == {
        PLANTED_FOLDER: "unreadable folder (permission denied): its files were not read"
    }
    assert [e.unit for e in result.exclusions] == ["file"]
    _accounted(result, 2)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == [
        "1 folder(s) under data.dicom_dir could not be read, so their files were not scanned; they are "
        "listed in exclusions.csv. Give the account running sitecal read access to include them."
    ]
    assert "DOE" not in caplog.text  # the folder's name is an identifier: counted, never named


@pytest.mark.timeout(10)
def test_the_unreadable_folder_reason_names_the_cause() -> None:
    assert unreadable_folder_reason(PermissionError(13, "Permission denied")) == (
        "unreadable folder (permission denied): its files were not read"
    )
    assert unreadable_folder_reason(OSError(5, "Input/output error")) == (
        "unreadable folder (input/output error): its files were not read"
    )


@pytest.mark.timeout(10)
def test_an_unreadable_root_is_an_error_naming_the_setting(tmp_path: Path, monkeypatch) -> None:
    folder = tmp_path / "dicom"
    folder.mkdir()

    def scandir(path: object) -> object:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(os, "scandir", scandir)
    with pytest.raises(DataError) as caught:
        scan_folder(folder, workers=1)
    assert str(caught.value) == (
        f"{folder}: the DICOM folder cannot be read (permission denied). Check data.dicom_dir in the "
        "protocol and that the account running sitecal may read it."
    )


@pytest.mark.timeout(20)
def test_an_image_declaring_a_huge_pixel_count_is_refused_before_decoding(root: Path) -> None:
    # 16 bytes of pixel data on disk each; decoding what they declare would take gigabytes
    _image(
        root / "huge.dcm", 2, rows=16384, columns=16384, SamplesPerPixel=3, PhotometricInterpretation="RGB"
    )
    _image(root / "cine.dcm", 3, rows=512, columns=512, NumberOfFrames=2000)
    _image(root / "at-limit.dcm", 4, rows=16384, columns=16384)  # 2**28 values: at the limit, not above
    assert DEFAULT_MAX_PIXELS_PER_IMAGE == 2**28
    result = scan_folder(root, workers=1)
    assert _reasons(result) == {
        "huge.dcm": "image too large: declares 16384 x 16384 x 3 samples = 805306368 pixel values, above "
        "the limit of 268435456 per image; raise inputs.max_pixels_per_image in the protocol to read it",
        "cine.dcm": "image too large: declares 512 x 512 x 2000 frames = 524288000 pixel values, above the "
        "limit of 268435456 per image; raise inputs.max_pixels_per_image in the protocol to read it",
    }
    assert sorted(i.path.name for i in result.instances) == ["at-limit.dcm", "good.dcm"]
    _accounted(result, 4)
    smaller = scan_folder(root, workers=1, max_pixels_per_image=2**24)
    assert _reasons(smaller)["at-limit.dcm"] == (
        "image too large: declares 16384 x 16384 = 268435456 pixel values, above the limit of 16777216 "
        "per image; raise inputs.max_pixels_per_image in the protocol to read it"
    )
    raised = scan_folder(root, workers=1, max_pixels_per_image=2**30)
    assert sorted(i.path.name for i in raised.instances) == [
        "at-limit.dcm",
        "cine.dcm",
        "good.dcm",
        "huge.dcm",
    ]
    with pytest.raises(
        DataError, match=r"'max_pixels_per_image' parameter of scan_folder must be an int >= 1"
    ):
        scan_folder(root, max_pixels_per_image=0)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [1, 2])
def test_pydicom_warnings_quoting_uids_reach_neither_stderr_nor_logs(
    root: Path, workers: int, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    # 40 files so that two worker processes are started (one per 32 files)
    for n in range(40):
        _image(root / f"f{n:02d}.dcm", 100 + n, StudyInstanceUID=f"{PLANTED_UID}{n:02d}")
    capfd.readouterr()
    caplog.clear()  # pydicom's log records of writing the planted files: only the scan is looked at
    with caplog.at_level(logging.DEBUG):
        result = scan_folder(root, workers=workers)
    assert result.files_found == 41 and not result.exclusions
    assert {i.study_instance_uid for i in result.instances} >= {f"{PLANTED_UID}00", f"{PLANTED_UID}39"}
    out, err = capfd.readouterr()
    for channel in (out, err, caplog.text):
        assert "MRN7777777" not in channel
    summaries = [r.getMessage() for r in caplog.records if "pydicom reported" in r.getMessage()]
    assert summaries == [
        "pydicom reported 40 problems it worked around while reading headers (values withheld): "
        "Invalid value for VR UI (x40)"
    ]


@pytest.mark.timeout(20)
def test_a_truncated_file_in_a_named_folder_leaks_nothing(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    # pydicom says "End of file reached before delimiter ... in file <path>": the path holds a name
    root = tmp_path / "dicom"
    folder = root / PLANTED_FOLDER
    folder.mkdir(parents=True)
    data = Path(get_testdata_file("MR_small_jp2klossless.dcm")).read_bytes()
    (folder / "cut.dcm").write_bytes(data[: len(data) * 6 // 10])
    with caplog.at_level(logging.DEBUG):
        result = scan_folder(root, workers=1)
    assert _reasons(result) == {f"{PLANTED_FOLDER}/cut.dcm": "truncated file"}
    out, err = capfd.readouterr()
    for channel in (out, err, caplog.text):
        assert "DOE" not in channel and "19650304" not in channel


@pytest.mark.timeout(20)
@pytest.mark.parametrize("fraction", [0.3, 0.6, 0.9])
def test_a_truncated_jpeg_2000_file_is_truncated_not_without_pixel_data(
    tmp_path: Path, fraction: float
) -> None:
    data = Path(get_testdata_file("MR_small_jp2klossless.dcm")).read_bytes()
    path = tmp_path / "cut.dcm"
    path.write_bytes(data[: int(len(data) * fraction)])
    study = str(pydicom.dcmread(get_testdata_file("MR_small_jp2klossless.dcm")).StudyInstanceUID)
    # the header before the pixel data is whole: the study is named, so its label is accounted for
    assert read_header(path, ["Modality"]) == scan.Unusable("truncated file", study)
    with pytest.raises(EOFError):
        open_dicom(path)


@pytest.mark.timeout(20)
def test_a_file_cut_inside_a_short_value_is_truncated(tmp_path: Path) -> None:
    # pydicom reads a short value without checking its length, so the cut file parses "fine"
    data = _image(tmp_path / "whole.dcm", 1).read_bytes()
    cut = data.index(b"MONOCHROME2") + 5
    (tmp_path / "cut.dcm").write_bytes(data[:cut])
    outcome = read_header(tmp_path / "cut.dcm", ["Modality"])
    assert isinstance(outcome, scan.Unusable) and outcome.reason == "truncated file"


@pytest.mark.timeout(20)
@pytest.mark.parametrize("seed", range(4))
def test_random_bytes_after_a_preamble_are_a_corrupt_header(tmp_path: Path, seed: int) -> None:
    path = tmp_path / "noise.dcm"
    path.write_bytes(b"\0" * 128 + b"DICM" + np.random.default_rng(seed).bytes(4000))
    assert read_header(path, ["Modality"]) == scan.Unusable(
        "corrupt DICOM header (no recognisable data element after the 'DICM' prefix)"
    )


@pytest.mark.timeout(20)
def test_multi_valued_values_are_written_as_dicom_writes_them(root: Path) -> None:
    _image(root / "typed.dcm", 2, ImageType=["ORIGINAL", "PRIMARY", "AXIAL"], PixelSpacing=[0.5, 0.25])
    result = scan_folder(root, ["ImageType", "PixelSpacing"], workers=1)
    values = {i.path.name: i.values for i in result.instances}["typed.dcm"]
    assert values["ImageType"] == "ORIGINAL\\PRIMARY\\AXIAL"
    assert values["PixelSpacing"] == "0.5\\0.25"
    assert render_value(b"SITE A\x00") == "SITE A"
    assert render_value(b"\x01\xff") == "01ff"
    assert render_value([b"A", "B"]) == "A\\B"


@pytest.fixture
def hang() -> Iterator[threading.Event]:
    """Released when the test ends, so that no abandoned read outlives it in this process."""
    release = threading.Event()
    yield release
    release.set()
    for thread in threading.enumerate():
        if thread.name == "sitecal-header-read":
            thread.join(5)


def _hanging_reader(release: threading.Event, name: str):
    real = header.open_dicom

    def reader(path, **kwargs):  # a file on a share that stopped answering
        if Path(path).name == name:
            release.wait()
        return real(path, **kwargs)

    return reader


@pytest.mark.timeout(20)
def test_a_read_that_hangs_is_cut_off_in_this_process(
    root: Path, monkeypatch: pytest.MonkeyPatch, hang: threading.Event
) -> None:
    _image(root / "stuck.dcm", 2)
    monkeypatch.setattr(header, "open_dicom", _hanging_reader(hang, "stuck.dcm"))
    started = time.monotonic()
    result = scan_folder(root, workers=1, read_timeout_s=0.5)
    assert time.monotonic() - started < 5
    assert _reasons(result) == {"stuck.dcm": "header read timed out after 0.5 s"}
    assert [i.path.name for i in result.instances] == ["good.dcm"]
    _accounted(result, 2)


@pytest.mark.timeout(60)
def test_a_read_that_hangs_in_a_worker_leaves_no_process_behind(
    root: Path, monkeypatch: pytest.MonkeyPatch, hang: threading.Event
) -> None:
    # workers inherit the patched reader by fork; under another start method this test would not hang
    # a worker and would fail on the reasons below, not pass silently
    assert multiprocessing.get_start_method() == "fork"
    for n in range(40):
        _image(root / f"f{n:02d}.dcm", 100 + n)
    monkeypatch.setattr(header, "open_dicom", _hanging_reader(hang, "f07.dcm"))
    started = time.monotonic()
    result = scan_folder(root, workers=2, read_timeout_s=1)
    assert time.monotonic() - started < 30
    assert _reasons(result) == {"f07.dcm": "header read timed out after 1 s"}
    assert len(result.instances) == 40
    _accounted(result, 41)
    assert multiprocessing.active_children() == []  # the pool's processes were joined, none is left


@pytest.mark.timeout(10)
def test_quiet_pydicom_hands_inner_notes_out_and_passes_other_threads() -> None:
    logger = logging.getLogger("pydicom")
    with quiet_pydicom() as outer:
        with quiet_pydicom() as inner:
            logger.warning("Invalid value for VR UI: '%s'", PLANTED_UID)
        assert inner.kinds() == ["Invalid value for VR UI"]
    assert outer.messages == inner.messages  # kept in memory to classify the file, never written
    assert outer.kinds() == ["Invalid value for VR UI"]


@pytest.mark.timeout(60)
def test_a_deflate_bomb_is_refused_without_inflating_it(tmp_path: Path) -> None:
    import zlib

    whole = Path(get_testdata_file("image_dfl.dcm")).read_bytes()
    # a real deflated file passes; the same header before a stream inflating to 64 MiB of zeros does not:
    # its first bytes are no data element, and nothing more is inflated (tests/security/test_image_memory.py
    # has the bombs made of valid elements, and the memory bounds)
    group_length = int.from_bytes(whole[140:144], "little")
    bomb = whole[: 144 + group_length]
    packer = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    bomb += packer.compress(b"\0" * (64 << 20)) + packer.flush()
    (tmp_path / "bomb.dcm").write_bytes(bomb)
    (tmp_path / "real.dcm").write_bytes(whole)
    assert len(bomb) < 1 << 20
    started = time.monotonic()
    assert read_header(tmp_path / "bomb.dcm", ["Modality"]) == scan.Unusable(
        "corrupt DICOM header (the deflated data set does not start with an explicit-VR data element)"
    )
    assert time.monotonic() - started < 1
    # pydicom's deflated test file has no SOPInstanceUID: it is read, and refused for that alone
    assert read_header(tmp_path / "real.dcm", ["Modality"]) == scan.Unusable(
        "missing required tag SOPInstanceUID"
    )


@pytest.mark.timeout(60)
def test_a_deflated_file_written_by_pydicom_is_read_in_well_under_a_second(tmp_path: Path) -> None:
    import zlib

    # pydicom pads the deflate stream to an even length: the byte after its end once made the header read
    # loop until the scan's 60 s timeout
    # (a stream under 1 MiB inflating to 2 MiB: its end is met in input held back from the step before,
    # followed by pydicom's pad byte)
    path = _image(tmp_path / "deflated.dcm", 1, rows=1024, columns=1024, BitsAllocated=16, BitsStored=12)
    ds = pydicom.dcmread(path)
    ds.PixelData = np.random.default_rng(5).integers(0, 16, size=1024 * 1024, dtype=np.uint16).tobytes()
    ds.HighBit = 11
    ds.file_meta.TransferSyntaxUID = pydicom.uid.DeflatedExplicitVRLittleEndian
    for length in range(8):  # until pydicom pads the stream: a comment's length changes its parity
        ds.ImageComments = "x" * length
        ds.save_as(path, enforce_file_format=True)
        whole = path.read_bytes()
        inflater = zlib.decompressobj(-zlib.MAX_WBITS)
        inflater.decompress(whole[144 + int.from_bytes(whole[140:144], "little") :])
        if inflater.unused_data:
            break
    assert inflater.unused_data == b"\0"
    started = time.monotonic()
    values = read_header(path, scan.BASE_KEYWORDS)
    assert time.monotonic() - started < 5
    assert isinstance(values, dict) and values["Rows"] == "1024"
    assert np.array_equal(open_dicom(path).pixel_array, ds.pixel_array)
