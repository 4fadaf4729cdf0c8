"""A series read through MONAI's LoadImage with sitecal's reader: slice order, geometry, refusals."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from monai.data import PydicomReader
from monai.transforms import LoadImage
from tests.series_files import write_series

from sitecal.errors import DicomError
from sitecal.inference import build_transforms
from sitecal.inference.transforms import dicom_loader

STUDY = "1.2.826.0.1.3680043.8.498.7001"


def _slice_ids(volume: np.ndarray) -> list[int]:
    """Which written slice each plane is (every pixel of slice k is HU 100 + k - 1024)."""
    values = np.asarray(volume)
    assert np.all(values == values[:, :1, :1])  # each plane is uniform
    return [int(v) - 100 + 1024 for v in values[:, 0, 0]]


def test_slices_follow_position_not_file_order_or_instance_number(tmp_path: Path) -> None:
    positions = [-40.0, -37.5, -35.0, -32.5, -30.0]
    paths = write_series(
        tmp_path / "s",
        positions,
        study_uid=STUDY,
        instance_numbers=[5, 4, 3, 2, 1],  # numbered head to feet: InstanceNumber is the wrong order
        file_order=[3, 0, 4, 1, 2],
    )
    shuffled = sorted(paths)  # file-name order, not slice order
    assert shuffled != paths
    volume = dicom_loader()([str(p) for p in shuffled])
    assert volume.shape == (5, 8, 6)
    assert _slice_ids(volume) == [0, 1, 2, 3, 4]

    # MONAI's own PydicomReader orders by InstanceNumber, so it reverses this series
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        monai_volume = LoadImage(reader=PydicomReader(), image_only=True)(str(tmp_path / "s"))
    monai_ids = [int(v) - 100 + 1024 for v in np.asarray(monai_volume)[0, 0, :]]
    assert monai_ids == [4, 3, 2, 1, 0]


def test_same_volume_as_monais_reader_where_instance_numbers_agree(tmp_path: Path) -> None:
    paths = write_series(tmp_path / "s", [0.0, 2.5, 5.0, 7.5], study_uid=STUDY, file_order=[2, 0, 3, 1])
    ours = np.asarray(dicom_loader()([str(p) for p in sorted(paths)]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = np.asarray(LoadImage(reader=PydicomReader(), image_only=True)(str(tmp_path / "s")))
    # MONAI returns (Columns, Rows, slices); sitecal (slices, Rows, Columns)
    np.testing.assert_array_equal(ours, np.transpose(theirs, (2, 1, 0)))


def test_affine_maps_indices_to_patient_positions_on_a_tilted_series(tmp_path: Path) -> None:
    tilt = np.deg2rad(12.0)
    orientation = (1.0, 0.0, 0.0, 0.0, float(np.cos(tilt)), float(np.sin(tilt)))
    paths = write_series(tmp_path / "s", [10.0, 5.0, 0.0], study_uid=STUDY, orientation=orientation)
    volume = dicom_loader()([str(p) for p in paths])
    assert _slice_ids(volume) == [2, 1, 0]  # ascending along the normal
    import pydicom

    affine = np.asarray(volume.affine)
    for s, k in enumerate([2, 1, 0]):
        ds = pydicom.dcmread(paths[k], stop_before_pixels=True)
        origin = np.array([float(v) for v in ds.ImagePositionPatient])
        np.testing.assert_allclose(affine @ [s, 0, 0, 1], [*origin, 1], atol=1e-3)
        # row r, column c: origin + c * 0.8 mm along the row direction + r * 0.7 mm along the column one
        expected = origin + 3 * 0.8 * np.array(orientation[:3]) + 2 * 0.7 * np.array(orientation[3:])
        np.testing.assert_allclose(affine @ [s, 2, 3, 1], [*expected, 1], atol=1e-3)


def test_volume_goes_through_protocol_transforms(tmp_path: Path) -> None:
    from sitecal.protocol import TransformSettings

    paths = write_series(tmp_path / "s", [0.0, 2.5, 5.0, 7.5], study_uid=STUDY)
    chain = build_transforms(
        [
            TransformSettings(name="EnsureChannelFirst", args={"channel_dim": "no_channel"}),
            TransformSettings(name="Resize", args={"spatial_size": [2, 4, 4]}),
        ]
    )
    out = chain([str(p) for p in paths])
    assert tuple(out.shape) == (1, 2, 4, 4)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"positions": [0.0, 2.5, 2.5, 5.0]}, "same ImagePositionPatient"),
        ({"positions": [0.0, 2.5, 5.0, 10.0]}, "a slice may be missing"),
    ],
)
def test_broken_geometry_is_refused_with_a_reason(tmp_path: Path, change: dict, message: str) -> None:
    paths = write_series(tmp_path / "s", change["positions"], study_uid=STUDY)
    with pytest.raises(DicomError, match=message):
        dicom_loader()([str(p) for p in paths])


def test_mixed_orientation_or_size_or_missing_position_is_refused(tmp_path: Path) -> None:
    axial = write_series(tmp_path / "a", [0.0, 2.5], study_uid=STUDY, series_uid="1.2.3.4")
    tilted = write_series(
        tmp_path / "b", [5.0], study_uid=STUDY, series_uid="1.2.3.5", orientation=(1, 0, 0, 0, 0.98, 0.199)
    )
    with pytest.raises(DicomError, match="ImageOrientationPatient"):
        dicom_loader()([str(p) for p in axial + tilted])
    small = write_series(tmp_path / "c", [5.0], study_uid=STUDY, series_uid="1.2.3.6", rows=4)
    with pytest.raises(DicomError, match="Rows differs"):
        dicom_loader()([str(p) for p in axial + small])
    import pydicom

    ds = pydicom.dcmread(axial[1])
    del ds.ImagePositionPatient
    ds.save_as(axial[1])
    with pytest.raises(DicomError, match="ImagePositionPatient missing"):
        dicom_loader()([str(p) for p in axial])
