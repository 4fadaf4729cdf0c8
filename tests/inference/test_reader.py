from __future__ import annotations

from pathlib import Path

import numpy as np
import pydicom
import pytest
from pydicom.dataset import FileMetaDataset
from pydicom.uid import ExplicitVRLittleEndian, SecondaryCaptureImageStorage, generate_uid

from sitecal.inference import build_transforms, presentation_values
from sitecal.protocol import TransformSettings


def _image(
    tmp_path: Path, pixels: np.ndarray, *, photometric: str, bits: int, slope: float, intercept: float
) -> Path:
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = SecondaryCaptureImageStorage
    meta.MediaStorageSOPInstanceUID = generate_uid()
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = pydicom.Dataset()
    ds.file_meta = meta
    ds.SOPClassUID, ds.SOPInstanceUID = meta.MediaStorageSOPClassUID, meta.MediaStorageSOPInstanceUID
    ds.StudyInstanceUID = generate_uid()
    ds.Rows, ds.Columns = pixels.shape
    ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, photometric
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, bits, bits - 1, 0
    ds.RescaleSlope, ds.RescaleIntercept = slope, intercept
    ds.PixelData = pixels.astype(np.uint16).tobytes()
    path = tmp_path / f"{photometric}.dcm"
    ds.save_as(path, enforce_file_format=True)
    return path


def test_monochrome1_inverted_then_rescaled(tmp_path: Path) -> None:
    pixels = np.array([[0, 1000], [4095, 2048]])
    path = _image(tmp_path, pixels, photometric="MONOCHROME1", bits=12, slope=2.0, intercept=-100.0)
    # by hand: (4095 - stored) * 2 - 100  ->  [[8090, 6090], [-100, 3994]]
    np.testing.assert_array_equal(presentation_values(pydicom.dcmread(path)), [[8090, 6090], [-100, 3994]])


def test_monochrome2_rescaled_not_transposed(tmp_path: Path) -> None:
    pixels = np.arange(6).reshape(2, 3)
    path = _image(tmp_path, pixels, photometric="MONOCHROME2", bits=16, slope=0.5, intercept=1.0)
    np.testing.assert_array_equal(presentation_values(pydicom.dcmread(path)), pixels * 0.5 + 1.0)


def test_load_image_chain_gives_channel_first_tensor(tmp_path: Path) -> None:
    pixels = np.random.default_rng(0).integers(0, 4000, size=(32, 48))
    path = _image(tmp_path, pixels, photometric="MONOCHROME2", bits=12, slope=1.0, intercept=0.0)
    chain = build_transforms(
        [
            TransformSettings(name="EnsureChannelFirst", args={"channel_dim": "no_channel"}),
            TransformSettings(name="Resize", args={"spatial_size": [16, 24]}),
            TransformSettings(name="NormalizeIntensity"),
        ]
    )
    out = chain(str(path))
    assert tuple(out.shape) == (1, 16, 24)
    assert float(out.mean()) == pytest.approx(0.0, abs=1e-5)


def test_unknown_transform_is_a_protocol_error() -> None:
    from sitecal.errors import ProtocolError

    # model_construct skips the schema (which refuses the name too): build_transforms checks again
    with pytest.raises(
        ProtocolError,
        match=r"inputs.transforms\[0\].name: 'Resise' is not a transform a protocol may name: .* "
        r"Did you mean 'Resize'\?$",
    ):
        build_transforms([TransformSettings.model_construct(name="Resise", args={})])
