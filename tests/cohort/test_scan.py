from __future__ import annotations

import shutil
from pathlib import Path

import pydicom
from pydicom.data import get_testdata_file

from sitecal.cohort.scan import scan_folder


def _folder(tmp_path: Path) -> Path:
    root = tmp_path / "dicom"
    (root / "a").mkdir(parents=True)
    source = Path(get_testdata_file("CT_small.dcm"))
    shutil.copy(source, root / "a" / "good.dcm")
    data = source.read_bytes()
    (root / "a" / "truncated.dcm").write_bytes(data[: len(data) - 3000])
    (root / "a" / "notes.dcm").write_text("not dicom at all")
    shutil.copy(source, root / "a" / "copy-of-good.dcm")  # same SOPInstanceUID
    ds = pydicom.dcmread(source)
    del ds.PixelData
    ds.SOPInstanceUID = pydicom.uid.generate_uid(entropy_srcs=["no-pixels"])
    ds.save_as(root / "a" / "nopixels.dcm")
    (root / ".hidden").write_text("skipped")
    return root


def test_scan_reads_headers_and_explains_every_exclusion(tmp_path: Path) -> None:
    root = _folder(tmp_path)
    for workers in (1, 2):
        result = scan_folder(root, ["ManufacturerModelName"], workers=workers)
        assert result.files_found == 5
        assert [i.path.name for i in result.instances] == ["copy-of-good.dcm"]
        reasons = {str(e.path): e.reason for e in result.exclusions}
        assert reasons == {
            "a/good.dcm": "duplicate file: identical copy of an instance already in the cohort",
            "a/truncated.dcm": "truncated file",
            "a/notes.dcm": "not a DICOM file",
            "a/nopixels.dcm": (
                "no pixel data although Rows and Columns are present (truncated file or header-only export)"
            ),
        }
        values = result.instances[0].values
        assert values["Modality"] == "CT"
        assert "PixelData" not in values


def test_a_reused_sop_instance_uid_with_other_content_is_a_uid_clash(tmp_path: Path) -> None:
    root = tmp_path / "dicom"
    root.mkdir()
    source = Path(get_testdata_file("CT_small.dcm"))
    shutil.copy(source, root / "a.dcm")
    ds = pydicom.dcmread(source)
    ds.SeriesDescription = "re-exported"  # same SOPInstanceUID, different file
    ds.save_as(root / "b.dcm")
    result = scan_folder(root, workers=1)
    assert [i.path.name for i in result.instances] == ["a.dcm"]
    (clash,) = result.exclusions
    assert str(clash.path) == "b.dcm"
    assert clash.reason.startswith("duplicate SOPInstanceUID with different content")
