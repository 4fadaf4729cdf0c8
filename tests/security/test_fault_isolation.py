"""One bad study is one exclusion with its own reason, and every other study still gets its logits.

Hostile or broken inputs from the security review (issue items 4 and 7): RescaleSlope NaN, inf and 1e308,
an image declaring more values than the reader's limit, a multi-frame and a colour image through a 2-D
greyscale chain, a transform whose message carries a path, a model that raises in ``forward`` for some
studies or for all, and one that returns NaN or inf logits. Each good study's logits are compared with a
direct forward pass of the same model on the same transformed image.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pydicom
import pytest
import torch
from monai.transforms import Compose
from pydicom.dataset import FileMetaDataset
from pydicom.uid import ExplicitVRLittleEndian, SecondaryCaptureImageStorage, generate_uid

from sitecal._scrub import safe_text
from sitecal.errors import DicomError, ModelError
from sitecal.inference import DicomImageReader, build_transforms, predict_files
from sitecal.inference._forward import NON_FINITE_LOGITS
from sitecal.inference.models import LoadedModel
from sitecal.inference.predict import InferenceResult
from sitecal.inference.transforms import dicom_loader
from sitecal.protocol import TransformSettings

#: Stored values 1..64 of every 8 x 8 test image; brighter images add a constant.
_PIXELS = np.arange(1, 65).reshape(8, 8)


def _dicom(
    path: Path,
    pixels: np.ndarray,
    *,
    slope: float = 1.0,
    intercept: float = 0.0,
    colour: bool = False,
    rows_columns: tuple[int, int] | None = None,
) -> Path:
    """A Secondary Capture file: greyscale 16-bit (frames first if 3-D), or 8-bit RGB when ``colour``."""
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = SecondaryCaptureImageStorage
    meta.MediaStorageSOPInstanceUID = generate_uid()
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = pydicom.Dataset()
    ds.file_meta = meta
    ds.SOPClassUID, ds.SOPInstanceUID = meta.MediaStorageSOPClassUID, meta.MediaStorageSOPInstanceUID
    ds.StudyInstanceUID = generate_uid()
    if colour:
        ds.Rows, ds.Columns = pixels.shape[:2]
        ds.SamplesPerPixel, ds.PhotometricInterpretation, ds.PlanarConfiguration = 3, "RGB", 0
        ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 8, 8, 7, 0
        ds.PixelData = pixels.astype(np.uint8).tobytes()
    else:
        ds.Rows, ds.Columns = rows_columns or pixels.shape[-2:]
        if pixels.ndim == 3:
            ds.NumberOfFrames = pixels.shape[0]
        ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
        ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 12, 11, 0
        ds.RescaleSlope, ds.RescaleIntercept = slope, intercept
        ds.PixelData = pixels.astype(np.uint16).tobytes()
    ds.save_as(path, enforce_file_format=True)
    return path


def _chain() -> Compose:
    """The demo protocol's 2-D greyscale chain, at 4 x 4."""
    return build_transforms(
        [
            TransformSettings(name="EnsureChannelFirst", args={"channel_dim": "no_channel"}),
            TransformSettings(name="Resize", args={"spatial_size": [4, 4]}),
        ]
    )


class _Linear(torch.nn.Module):
    """Two logits from a fixed linear map of the 4 x 4 image."""

    def __init__(self) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.weight = torch.nn.Parameter(torch.randn(16, 2, generator=generator) / 100)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1) @ self.weight


class _RaisesWhenBright(_Linear):
    """Raises, naming a path and a UID, when any image in the batch has a mean above 1000."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool((x.flatten(1).mean(1) > 1000).any()):
            raise ValueError(
                "intensity out of range for /site/DOE^JANE/1.2.840.99999.1.7 (see the model card)"
            )
        return super().forward(x)


class _NonFiniteWhenBright(_Linear):
    """NaN logits for a mean in (1000, 3000], inf above, and honest logits otherwise."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = super().forward(x)
        mean = x.flatten(1).mean(1, keepdim=True)
        out = torch.where(mean > 1000, torch.full_like(out, float("nan")), out)
        return torch.where(mean > 3000, torch.full_like(out, float("inf")), out)


class _AlwaysRaises(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (1x16 and 10x2)")


class _RecordingCache:
    """Stands in for LogitCache: nothing cached, and every stored row recorded."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.stored: dict[str, np.ndarray] = {}

    def load(self) -> dict[str, np.ndarray]:
        return {}

    def store(self, keys: list[str], logits: np.ndarray) -> None:
        self.stored.update(zip(keys, np.asarray(logits), strict=True))


def _model(module: torch.nn.Module, tmp_path: Path) -> LoadedModel:
    return LoadedModel(module=module, name="m", format="torchscript", sha256="a" * 64, path=tmp_path)


def _direct(module: torch.nn.Module, chain: Any, path: Path) -> np.ndarray:
    """The model on one transformed image, without predict_files."""
    with torch.inference_mode():
        return module(torch.as_tensor(chain(str(path)), dtype=torch.float32)[None]).numpy()[0]


def _assert_good_logits(result: InferenceResult, module: torch.nn.Module, files: list[Path]) -> None:
    chain = _chain()
    expected = np.stack([_direct(module, chain, files[i]) for i in result.ok])
    np.testing.assert_allclose(result.logits, expected, rtol=1e-6, atol=1e-7)


@pytest.mark.timeout(60)
def test_non_finite_rescale_is_an_exclusion_named_by_its_header(tmp_path: Path) -> None:
    files = [
        _dicom(tmp_path / "good-1.dcm", _PIXELS),
        _dicom(tmp_path / "slope-nan.dcm", _PIXELS, slope=float("nan")),
        _dicom(tmp_path / "slope-inf.dcm", _PIXELS, slope=float("inf")),
        _dicom(tmp_path / "slope-1e308.dcm", _PIXELS, slope=1e308),  # finite, but past float32 (and float64)
        _dicom(tmp_path / "intercept-nan.dcm", _PIXELS, intercept=float("nan")),
        _dicom(tmp_path / "good-2.dcm", _PIXELS + 7),
    ]
    module = _Linear()
    result = predict_files(_model(module, tmp_path), files, _chain(), n_classes=2, batch_size=4)
    fix = "correct the header, or exclude the image."
    assert result.failures == (
        (1, f"RescaleSlope (0028,1053) is not a finite number (nan): {fix}"),
        (2, f"RescaleSlope (0028,1053) is not a finite number (inf): {fix}"),
        (3, f"pixel values are not finite after rescale (RescaleSlope 1e+308, RescaleIntercept 0): {fix}"),
        (4, f"RescaleIntercept (0028,1052) is not a finite number (nan): {fix}"),
    )
    assert result.ok.tolist() == [0, 5]
    assert (result.n_model_failed, result.n_non_finite) == (0, 0)
    _assert_good_logits(result, module, files)


@pytest.mark.timeout(30)
def test_an_overflowing_rescale_is_refused_under_a_voi_window_too(tmp_path: Path) -> None:
    path = _dicom(tmp_path / "slope-1e308.dcm", _PIXELS, slope=1e308)
    ds = pydicom.dcmread(path)
    ds.WindowCenter, ds.WindowWidth = 40, 400
    # 64 x 1e308 overflows float64, which a window would silently clip to 1.0
    with pytest.raises(DicomError) as caught:
        DicomImageReader(voi="window").get_data([ds])
    assert str(caught.value) == (
        "pixel values are not finite after rescale (RescaleSlope 1e+308, RescaleIntercept 0): correct the "
        "header, or exclude the image."
    )


@pytest.mark.timeout(30)
def test_an_image_declaring_more_values_than_the_limit_is_refused_before_decoding(tmp_path: Path) -> None:
    # 16385 x 16384 declared over 128 bytes of pixel data: decoding would fail as truncated, and a
    # compressed stream of that size would decode to 2 GiB; the default limit (2**28) speaks first
    path = _dicom(tmp_path / "bomb.dcm", _PIXELS, rows_columns=(16385, 16384))
    reader = DicomImageReader()
    with pytest.raises(DicomError) as caught:
        reader.get_data(reader.read(path))
    assert str(caught.value) == (
        "image declares 16385 x 16384 pixels x 1 frame x 1 sample = 268,451,840 values, more than the "
        "limit of 268,435,456 per image; it was not decoded. Raise inputs.max_pixels_per_image in the "
        "protocol if such images are expected."
    )
    small = DicomImageReader(max_values=63)
    with pytest.raises(DicomError) as caught:
        small.get_data(small.read(_dicom(tmp_path / "small.dcm", _PIXELS)))
    assert str(caught.value) == (
        "image declares 8 x 8 pixels x 1 frame x 1 sample = 64 values, more than the limit of 63 "
        "per image; it was not decoded. Raise inputs.max_pixels_per_image in the protocol if such images are "
        "expected."
    )
    series = [_dicom(tmp_path / f"slice-{i}.dcm", _PIXELS) for i in range(2)]
    limited = DicomImageReader(max_values=127)
    with pytest.raises(
        DicomError, match=r"^series of 2 images declares 128 values in all, more than the limit of 127 "
    ):
        limited.get_data(limited.read(series))
    with pytest.raises(ValueError, match=r"^max_values must be an int >= 1\. Got 0\.$"):
        DicomImageReader(max_values=0)


@pytest.mark.timeout(60)
def test_a_multi_frame_and_a_colour_image_get_the_transform_s_own_reason(tmp_path: Path) -> None:
    files = [
        _dicom(tmp_path / "good.dcm", _PIXELS),
        _dicom(tmp_path / "cine.dcm", np.stack([_PIXELS] * 3)),  # 3 frames
        _dicom(tmp_path / "photo.dcm", np.stack([_PIXELS] * 3, axis=-1), colour=True),  # RGB
        _dicom(tmp_path / "good-2.dcm", _PIXELS + 3),
    ]
    module = _Linear()
    result = predict_files(_model(module, tmp_path), files, _chain(), n_classes=2, batch_size=4)
    # MONAI's own messages, unwrapped from its "applying transform <...>" RuntimeError
    assert result.failures == (
        (
            1,
            "3-frame image that the transforms cannot take: Resize: len(spatial_size) must be greater or "
            "equal to img spatial dimensions, got spatial_size=2 img=3.",
        ),
        (
            2,
            "colour image (3 samples per pixel) that the transforms cannot take: Resize: Sequence must have "
            "length 3, got 2.",
        ),
    )
    assert result.ok.tolist() == [0, 3]
    _assert_good_logits(result, module, files)


class _Leaky:
    """A transform whose error names a folder, a person, a UID, a date and a record number."""

    def __call__(self, image: Any) -> Any:
        raise ValueError(
            "cannot use /archive/DOE^JANE_19650304/IMG0001 series 1.2.840.113619.2.55.3 of 1965-03-04 "
            "MRN7777777 " + "x" * 300
        )


class _NaNs:
    def __call__(self, image: Any) -> Any:
        return image * float("nan")


@pytest.mark.timeout(60)
def test_a_transform_s_message_reaches_the_reason_without_identifiers(tmp_path: Path) -> None:
    files = [_dicom(tmp_path / "good.dcm", _PIXELS)]
    module = _Linear()
    leaky = Compose([dicom_loader(), _Leaky()], map_items=False)
    result = predict_files(_model(module, tmp_path), files, leaky, n_classes=2)
    ((index, reason),) = result.failures
    assert index == 0
    # the message is cut to 200 characters, "..." included; the prefix is sitecal's own
    message = "cannot use <path> series <uid> of <date> MRN<number> "
    assert reason == "a transform failed: _Leaky: " + message + "x" * (197 - len(message)) + "..."
    for secret in ("DOE", "JANE", "19650304", "archive", "1.2.840", "7777777", "1965"):
        assert secret not in reason
    nans = Compose([dicom_loader(), _NaNs()], map_items=False)
    result = predict_files(_model(module, tmp_path), files, nans, n_classes=2)
    assert result.failures == (
        (
            0,
            "image values are not finite (NaN or infinity) after the transforms: check inputs.transforms "
            "(e.g. an intensity range of zero width).",
        ),
    )


@pytest.mark.timeout(30)
def test_safe_text_scrubs_paths_names_uids_and_numbers() -> None:
    assert (
        safe_text(
            "failed at C:\\PACS\\SMITH^JOHN\\x.dcm and scan_DOE^JANE.dcm, uid 1.2.3.4\n 0x7ffd12 "
            "<a.B object at 0x1f> of 10x2"
        )
        == "failed at <path> and <file>, uid <uid> <address> B of 10x2"
    )
    assert (
        safe_text("ratio 1.5 of 3 after 0.125 s, 12345 voxels")
        == "ratio 1.5 of 3 after 0.125 s, 12345 voxels"
    )
    assert safe_text("y" * 250) == "y" * 197 + "..."


@pytest.mark.timeout(60)
def test_a_model_that_raises_for_some_studies_excludes_only_those(tmp_path: Path) -> None:
    files = [
        _dicom(tmp_path / f"study-{i}.dcm", _PIXELS + (2000 if i in (1, 4) else 10 * i)) for i in range(6)
    ]
    module = _RaisesWhenBright()
    result = predict_files(_model(module, tmp_path), files, _chain(), n_classes=2, batch_size=4)
    reason = (
        "the model failed on this study (ValueError: intensity out of range for <path> (see the model card))"
    )
    assert result.failures == ((1, reason), (4, reason))
    assert result.ok.tolist() == [0, 2, 3, 5]
    assert (result.n_model_failed, result.n_non_finite) == (2, 0)
    _assert_good_logits(result, module, files)


@pytest.mark.timeout(60)
def test_a_model_that_fails_on_every_study_alike_is_a_model_error(tmp_path: Path) -> None:
    files = [_dicom(tmp_path / f"study-{i}.dcm", _PIXELS + i) for i in range(3)]
    with pytest.raises(ModelError) as caught:
        predict_files(_model(_AlwaysRaises(), tmp_path), files, _chain(), n_classes=2, batch_size=2)
    assert str(caught.value) == (
        "model 'm' failed on every study it was given (3), each time with RuntimeError: mat1 and mat2 shapes "
        "cannot be multiplied (1x16 and 10x2). The model is broken, not the data: check model.architecture, "
        "its arguments and weights, and the input shape inputs.transforms produce."
    )


@pytest.mark.timeout(60)
def test_non_finite_logits_are_exclusions_and_never_cached(tmp_path: Path) -> None:
    files = [
        _dicom(tmp_path / f"study-{i}.dcm", _PIXELS + {1: 2000, 3: 3500}.get(i, 10 * i)) for i in range(5)
    ]
    module = _NonFiniteWhenBright()
    cache = _RecordingCache(tmp_path)
    keys = [f"k{i}" for i in range(5)]
    result = predict_files(
        _model(module, tmp_path),
        files,
        _chain(),
        n_classes=2,
        batch_size=4,
        cache=cache,
        keys=keys,  # type: ignore[arg-type]
    )
    assert result.failures == ((1, NON_FINITE_LOGITS), (3, NON_FINITE_LOGITS))
    assert NON_FINITE_LOGITS == "the model returned non-finite logits"
    assert result.ok.tolist() == [0, 2, 4]
    assert (result.n_model_failed, result.n_non_finite, result.n_cached) == (0, 2, 0)
    assert sorted(cache.stored) == ["k0", "k2", "k4"]
    _assert_good_logits(result, module, files)


class _MeanLogits(torch.nn.Module):
    """Takes any image size: logits (mean, -mean) in thousands."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.flatten(1).mean(1, keepdim=True) / 1000
        return torch.cat([mean, -mean], dim=1)


@pytest.mark.timeout(60)
def test_images_of_different_sizes_in_one_batch_are_not_a_crash(tmp_path: Path) -> None:
    # a chain without Resize: the images cannot be stacked into one batch, and need not be
    files = [
        _dicom(tmp_path / "small.dcm", _PIXELS),
        _dicom(tmp_path / "large.dcm", np.tile(_PIXELS, (2, 2))),
    ]
    chain = build_transforms(
        [TransformSettings(name="EnsureChannelFirst", args={"channel_dim": "no_channel"})]
    )
    result = predict_files(_model(_MeanLogits(), tmp_path), files, chain, n_classes=2, batch_size=2)
    assert result.failures == ()
    np.testing.assert_allclose(result.logits, [[0.0325, -0.0325], [0.0325, -0.0325]], rtol=1e-6)


@pytest.mark.timeout(300)
def test_every_unusable_real_file_gets_its_specific_reason(tmp_path: Path) -> None:
    """pydicom's own test files (real colour, multi-frame, compressed, broken) through the demo's chain."""
    import os

    from sitecal.cohort.scan import scan_folder

    test_files = Path(os.path.dirname(pydicom.data.__file__)) / "test_files"
    scan = scan_folder(test_files, workers=1)
    files = [i.path for i in scan.instances]
    result = predict_files(_model(_Linear(), tmp_path), files, _chain(), n_classes=2, batch_size=8)
    reasons = dict(result.failures)
    assert len(result.ok) + len(reasons) == len(files)
    assert reasons, "some of pydicom's test files are colour or multi-frame: the 2-D grey chain refuses them"
    for reason in reasons.values():
        assert "(RuntimeError)" not in reason and not reason.startswith("image cannot be loaded"), reason
        # the transform, the decoder or the header names the problem; no path of the site
        assert ("Resize" in reason) or ("Pixel Data" in reason) or ("image" in reason), reason
        assert "test_files" not in reason and "/" not in reason, reason
