"""Every file pydicom ships for its own tests is loaded, or becomes an exclusion with a specific reason.

The sweep runs the header scan over pydicom's bundled ``test_files`` folder and then the pipeline's loader
(``LoadImage`` with sitecal's reader) over every file whose header was usable, duplicates included. Lossless
encodings of one image are checked against the uncompressed file and colour conversions against pydicom.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pydicom
import pydicom.data
import pytest
from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.pixels import apply_color_lut, apply_windowing
from pydicom.uid import ImplicitVRLittleEndian

from sitecal.cohort.scan import BASE_KEYWORDS, read_header, scan_folder
from sitecal.errors import DicomError
from sitecal.inference.reader import presentation_values, window
from sitecal.inference.transforms import dicom_loader

TEST_FILES = Path(os.path.dirname(pydicom.data.__file__)) / "test_files"

#: What the scan must say of these files (a substring of the reason).
SCAN_REASONS = {
    "MR_truncated.dcm": "truncated file",
    "badVR.dcm": "malformed value in tag NumberOfFrames",
    "no_meta.dcm": "not a DICOM file",
    "README.txt": "not a DICOM file",
    "crayons.icc": "not a DICOM file",
    "zipMR.gz": "not a DICOM file",
    "test1.json": "not a DICOM file",
    "ExplVR_BigEndNoMeta.dcm": "no pixel data",  # read without File Meta Information
    "rtstruct.dcm": "no pixel data",  # no preamble
    "rtplan.dcm": "no pixel data",
    "test-SR.dcm": "no pixel data",
    "waveform_ecg.dcm": "no pixel data",
    "DICOMDIR": "DICOMDIR media directory",
    "JPEGLSNearLossless_08.dcm": "missing required tag StudyInstanceUID",
    "SC_rgb_jpeg_app14_dcmd.dcm": "duplicate file: identical copy",
    "MR_small_RLE.dcm": "duplicate SOPInstanceUID with different content",
}
#: Files with a usable header whose pixel data no installed decoder can decode (malformed streams).
_CORRUPT = "Pixel Data (7FE0,0010) corrupt: no installed decoder could decode it"
UNDECODABLE = {
    "JPEG-lossy.dcm": f"{_CORRUPT} (JPEG Extended",
    "JPEG2000-embedded-sequence-delimiter.dcm": f"{_CORRUPT} (JPEG 2000",
}


@pytest.fixture(scope="module")
def scan():
    return scan_folder(TEST_FILES, workers=1)


@pytest.fixture(scope="module")
def loader():
    return dicom_loader()


def _all_files() -> list[Path]:
    return sorted(p for p in TEST_FILES.rglob("*") if p.is_file() and not p.name.startswith("."))


def test_every_bundled_file_is_an_instance_or_an_exclusion(scan) -> None:
    files = _all_files()
    assert len(files) > 150  # pydicom 3 ships 170+ files here, 78+ of them .dcm
    assert scan.files_found == len(files)
    accounted = [i.path.relative_to(TEST_FILES) for i in scan.instances] + [e.path for e in scan.exclusions]
    assert sorted(accounted) == sorted(p.relative_to(TEST_FILES) for p in files)
    assert all(e.reason for e in scan.exclusions)


def test_scan_reasons_are_specific(scan) -> None:
    reasons: dict[str, list[str]] = {}
    for e in scan.exclusions:
        reasons.setdefault(Path(e.path).name, []).append(e.reason)
    for name, expected in SCAN_REASONS.items():
        assert name in reasons, name
        assert any(expected in reason for reason in reasons[name]), (name, reasons[name])
    # no catch-all reasons
    assert not [r for rs in reasons.values() for r in rs if "corrupt DICOM header" in r]


def test_an_instance_found_twice_is_counted_once(scan) -> None:
    uids = [i.sop_instance_uid for i in scan.instances]
    assert len(uids) == len(set(uids))
    duplicates = [e for e in scan.exclusions if e.reason.startswith("duplicate")]
    assert len(duplicates) >= 20  # pydicom re-uses UIDs across encodings of one image


def test_every_file_with_a_usable_header_loads_or_names_why_not(loader) -> None:
    loaded, failed = [], {}
    for path in _all_files():
        header = read_header(path, BASE_KEYWORDS)
        if not isinstance(header, dict):
            continue
        try:
            image = loader(str(path))
        except DicomError as exc:
            failed[path.name] = str(exc)
            continue
        assert np.isfinite(np.asarray(image)).all(), path.name
        loaded.append(path.name)
    assert set(failed) == set(UNDECODABLE), failed
    for name, reason in UNDECODABLE.items():
        assert failed[name].startswith(reason), failed[name]
    # every compressed transfer syntax the issue names is among the loaded files
    for name in (
        "JPGExtended.dcm",  # JPEG extended (12-bit)
        "SC_rgb_jpeg_dcmtk.dcm",  # JPEG baseline
        "MR_small_jpeg_ls_lossless.dcm",  # JPEG-LS
        "MR_small_jp2klossless.dcm",  # JPEG 2000
        "MR_small_RLE.dcm",  # RLE
        "image_dfl.dcm",  # deflated
        "MR_small_bigendian.dcm",  # big endian
        "MR_small_implicit.dcm",  # implicit VR
        "examples_palette.dcm",  # palette colour
        "examples_ybr_color.dcm",  # YBR, multi-frame
    ):
        assert name in loaded, name


def _values(name: str) -> np.ndarray:
    return presentation_values(pydicom.dcmread(TEST_FILES / name))


@pytest.mark.parametrize(
    "name",
    [
        "MR_small_RLE.dcm",
        "MR_small_bigendian.dcm",
        "MR_small_expb.dcm",
        "MR_small_implicit.dcm",
        "MR_small_jp2klossless.dcm",
        "MR_small_jpeg_ls_lossless.dcm",
        "MR_small_padded.dcm",
    ],
)
def test_lossless_encodings_give_the_uncompressed_values(name: str) -> None:
    np.testing.assert_array_equal(_values(name), _values("MR_small.dcm"))


@pytest.mark.parametrize(
    ("name", "reference"),
    [
        ("SC_rgb_gdcm_KY.dcm", "SC_rgb_rle.dcm"),  # JPEG 2000 lossless vs RLE
        ("SC_rgb_jpeg_gdcm.dcm", "SC_rgb_rle.dcm"),  # JPEG lossless vs RLE
        ("SC_rgb_small_odd_big_endian.dcm", "SC_rgb_small_odd.dcm"),
    ],
)
def test_lossless_colour_encodings_give_the_same_rgb(name: str, reference: str) -> None:
    np.testing.assert_array_equal(_values(name), _values(reference))


def test_rescale_is_applied() -> None:
    ds = pydicom.dcmread(TEST_FILES / "CT_small.dcm")
    expected = ds.pixel_array.astype(np.float64) * float(ds.RescaleSlope) + float(ds.RescaleIntercept)
    assert float(ds.RescaleIntercept) != 0
    np.testing.assert_array_equal(presentation_values(ds), expected.astype(np.float32))


def test_palette_colour_goes_through_its_lookup_tables() -> None:
    ds = pydicom.dcmread(TEST_FILES / "examples_palette.dcm")
    rgb = presentation_values(ds)
    assert rgb.shape == (*ds.pixel_array.shape, 3)
    np.testing.assert_array_equal(rgb, apply_color_lut(ds.pixel_array, ds).astype(np.float32))


def test_ybr_is_converted_to_rgb() -> None:
    rgb = _values("SC_ybr_full_422_uncompressed.dcm")
    reference = _values("SC_rgb_rle.dcm")  # the same picture stored losslessly as RGB
    assert rgb.shape == reference.shape
    # 4:2:2 chroma subsampling and 8-bit rounding move values by a few levels, not more
    assert np.abs(rgb - reference).max() <= 8
    assert np.abs(rgb - reference).mean() < 1.5


def test_a_file_without_preamble_or_meta_header_is_read(tmp_path: Path) -> None:
    ds = Dataset()
    ds.SOPClassUID = "1.2.840.10008.5.1.4.1.1.7"
    ds.StudyInstanceUID = "1.2.3.4.5.6"
    pixels = np.arange(12, dtype=np.uint16).reshape(3, 4)
    ds.set_pixel_data(pixels, "MONOCHROME2", 12)
    ds.SOPInstanceUID = "1.2.3.4.5.6.7"  # after set_pixel_data, which generates one
    ds.file_meta = FileMetaDataset()
    ds.file_meta.TransferSyntaxUID = ImplicitVRLittleEndian
    path = tmp_path / "IMG0001"
    ds.save_as(path, implicit_vr=True, little_endian=True, enforce_file_format=False)
    ds.file_meta = FileMetaDataset()
    with path.open("rb") as fh:
        assert fh.read(132)[128:] != b"DICM"
    header = read_header(path, BASE_KEYWORDS)
    assert isinstance(header, dict) and header["SOPInstanceUID"] == "1.2.3.4.5.6.7"
    np.testing.assert_array_equal(np.asarray(dicom_loader()(str(path))), pixels.astype(np.float32))


@pytest.mark.parametrize("function", ["LINEAR", "LINEAR_EXACT", "SIGMOID"])
@pytest.mark.parametrize(("center", "width"), [(40.0, 400.0), (0.0, 1.0), (1000.5, 2.0), (-600.0, 1500.0)])
def test_window_matches_pydicom_scaled_to_unit_range(function: str, center: float, width: float) -> None:
    ds = Dataset()
    ds.PhotometricInterpretation = "MONOCHROME2"
    ds.BitsStored, ds.PixelRepresentation = 16, 1
    ds.RescaleSlope, ds.RescaleIntercept = 1, 0
    ds.WindowCenter, ds.WindowWidth, ds.VOILUTFunction = center, width, function
    x = np.linspace(-3000, 3000, 6001)
    y_min, y_max = -(2**15), 2**15 - 1
    with np.errstate(over="ignore"):  # pydicom's sigmoid overflows to the right limit far from the centre
        expected = (apply_windowing(x.copy(), ds) - y_min) / (y_max - y_min)
    np.testing.assert_allclose(window(x, center, width, function), expected, atol=1e-9)


def test_voi_window_is_applied_where_the_protocol_asks() -> None:
    ds = pydicom.dcmread(TEST_FILES / "CT_small.dcm")
    ds.WindowCenter, ds.WindowWidth = 40, 400
    shown = presentation_values(ds, voi="window")
    assert shown.min() >= 0 and shown.max() <= 1
    modality = ds.pixel_array * float(ds.RescaleSlope) + float(ds.RescaleIntercept)
    np.testing.assert_allclose(shown, window(modality, 40, 400), atol=1e-6)
    ds.PhotometricInterpretation = "MONOCHROME1"
    np.testing.assert_allclose(
        presentation_values(ds, voi="window"), 1 - window(modality, 40, 400), atol=1e-6
    )
    del ds.WindowCenter, ds.WindowWidth
    with pytest.raises(DicomError, match=r"inputs\.voi is 'window'"):
        presentation_values(ds, voi="window")
