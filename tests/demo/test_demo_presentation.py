from __future__ import annotations

import io

import numpy as np
import pydicom
import pytest
import torch
from _radiograph import model_inputs, preprocess_batch  # examples/demo (tests/demo/conftest.py)
from pydicom.dataset import Dataset

from sitecal.demo import (
    SCANNERS,
    SITES,
    DemoManifest,
    demo_transforms,
    presentation_values,
    stored_to_presentation,
    synthesize_stored,
)
from sitecal.demo._dicom import StudyHeader, build_dataset
from sitecal.errors import DicomError

PROFILE_BY_MODEL = {s.model_name: s for s in SCANNERS}
SITE_BY_KEY = {s.key: s for s in SITES}


def _grey(stored: np.ndarray, photometric: str, bits: int) -> Dataset:
    ds = Dataset()
    ds.Rows, ds.Columns = stored.shape
    ds.SamplesPerPixel, ds.PixelRepresentation = 1, 0
    ds.set_pixel_data(stored.astype(np.uint16), photometric, bits)
    return ds


def test_monochrome1_inverts_before_rescale() -> None:
    stored = np.array([[0, 4095, 100], [10, 2000, 4000]])  # 2 x 3: also checks there is no transposition
    ds = _grey(stored, "MONOCHROME1", 12)
    ds.RescaleSlope, ds.RescaleIntercept = 2.0, -5.0
    values = presentation_values(ds)
    assert values.dtype == np.float32 and values.shape == (2, 3)
    # (2**12 - 1 - stored) * 2 - 5, by hand: 4095*2-5 = 8185, 0*2-5 = -5, 3995*2-5 = 7985, ...
    np.testing.assert_array_equal(values, [[8185.0, -5.0, 7985.0], [8165.0, 4185.0, 185.0]])


def test_monochrome2_applies_rescale_and_defaults() -> None:
    stored = np.array([[0, 1], [2, 65535]])
    ds = _grey(stored, "MONOCHROME2", 16)
    np.testing.assert_array_equal(presentation_values(ds), stored.astype(np.float32))  # no rescale tags
    ds.RescaleSlope, ds.RescaleIntercept = 0.25, 100.0
    np.testing.assert_array_equal(presentation_values(ds), stored * 0.25 + 100.0)


def test_presentation_values_errors_name_the_tag() -> None:
    with pytest.raises(DicomError, match=r"Pixel Data \(7FE0,0010\)"):
        presentation_values(Dataset())
    ds = _grey(np.zeros((2, 2)), "MONOCHROME2", 12)
    ds.PhotometricInterpretation = "PALETTE COLOR"  # without its lookup tables
    with pytest.raises(DicomError, match=r"PALETTE COLOR lookup tables \(0028,1101-1203\)"):
        presentation_values(ds)
    ds.PhotometricInterpretation = "YBR_FULL"  # a colour space for three samples, not one
    with pytest.raises(DicomError, match=r"PhotometricInterpretation \(0028,0004\).*'YBR_FULL'"):
        presentation_values(ds)


def test_file_values_equal_the_profile_arithmetic_for_every_scanner(demo_cohort: DemoManifest) -> None:
    seen = set()
    for study in demo_cohort.studies:
        if not study.intact:
            continue
        ds = pydicom.dcmread(demo_cohort.dicom_dir / study.relative_path)
        profile = PROFILE_BY_MODEL[ds.ManufacturerModelName]
        assert profile.photometric == ds.PhotometricInterpretation
        values = presentation_values(ds)
        np.testing.assert_array_equal(values, stored_to_presentation(ds.pixel_array, profile))
        # After the convention every scanner, MONOCHROME1 included, shows dense tissue bright:
        # the centre of the body (mediastinum) is brighter than the air in the corners.
        assert values[40:90, 58:70].mean() > values[:8, :8].mean()
        seen.add(profile.key)
    assert seen == {s.key for s in SCANNERS}


def test_monochrome1_file_stores_inverted_values(demo_cohort: DemoManifest) -> None:
    study = next(s for s in demo_cohort.studies if s.intact and s.scanner == "FCR Demo CR")
    ds = pydicom.dcmread(demo_cohort.dicom_dir / study.relative_path)
    assert ds.PhotometricInterpretation == "MONOCHROME1"
    stored = ds.pixel_array
    assert stored[:8, :8].mean() > stored[40:90, 58:70].mean()  # air is stored bright in MONOCHROME1


def test_batched_preprocessing_equals_the_monai_transforms(demo_cohort: DemoManifest) -> None:
    transforms = demo_transforms()
    arrays = [
        presentation_values(pydicom.dcmread(demo_cohort.dicom_dir / s.relative_path))
        for s in demo_cohort.studies[:25]
    ]
    reference = torch.stack([torch.as_tensor(transforms(a)).as_subclass(torch.Tensor) for a in arrays])
    assert reference.shape == (25, 1, 64, 64)
    torch.testing.assert_close(preprocess_batch(np.stack(arrays)), reference, atol=1e-5, rtol=1e-5)
    flat = np.full((128, 128), 7.0, dtype=np.float32)  # zero deviation: MONAI leaves it undivided
    torch.testing.assert_close(
        preprocess_batch(flat[None]), torch.as_tensor(transforms(flat))[None].as_subclass(torch.Tensor)
    )


@pytest.mark.parametrize("scanner", SCANNERS, ids=lambda s: s.key)
def test_training_inputs_equal_presentation_values_plus_transforms_of_the_written_file(scanner) -> None:
    stored, _ = synthesize_stored(3, scanner, np.random.default_rng(11))
    training = model_inputs(stored, scanner)
    transforms = demo_transforms()
    for i in range(3):
        header = StudyHeader(
            "X1",
            "DEMO^P000001",
            "19600101",
            "F",
            "063Y",
            "20230101",
            "120000",
            "A1",
            "1.2.3.1",
            "1.2.3.2",
            f"1.2.3.{3 + i}",
            "1",
            1,
            1,
        )
        buffer = io.BytesIO()
        pydicom.dcmwrite(
            buffer,
            build_dataset(header, stored[i], scanner, SITE_BY_KEY[scanner.site]),
            enforce_file_format=True,
        )
        ds = pydicom.dcmread(io.BytesIO(buffer.getvalue()))
        pipeline = torch.as_tensor(transforms(presentation_values(ds))).as_subclass(torch.Tensor)
        torch.testing.assert_close(training[i], pipeline, atol=1e-5, rtol=1e-5)
