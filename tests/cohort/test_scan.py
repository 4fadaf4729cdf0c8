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
            "a/good.dcm": "duplicate SOPInstanceUID (kept the first file)",
            "a/truncated.dcm": "truncated file",
            "a/notes.dcm": "not a DICOM file",
            "a/nopixels.dcm": "no pixel data (not an image)",
        }
        values = result.instances[0].values
        assert values["Modality"] == "CT"
        assert "PixelData" not in values


def test_pydicom_test_files_never_crash_the_scan(tmp_path: Path) -> None:
    import pydicom.data

    # the files bundled with pydicom (get_testdata_files would try to download the others)
    root = tmp_path / "all"
    root.mkdir()
    files = sorted((Path(pydicom.data.__file__).parent / "test_files").rglob("*.dcm"))
    for i, f in enumerate(files):
        shutil.copy(f, root / f"{i:03d}.dcm")
    result = scan_folder(root, workers=1)
    assert len(result.instances) + len(result.exclusions) == len(files)
    assert all(e.reason for e in result.exclusions)
