"""Pixel reading: sitecal's reader inside MONAI's LoadImage against MONAI's default and bare pydicom.

Files: N generated 512x512 int16 CT files (default 300), read once each, in one process, in two sets:
a minimal header (about 25 elements) and a header of clinical size (250 private elements and a
25-item Referenced Image Sequence, about 330 elements, as vendors' CT files carry). MONAI's reader
converts every header element to JSON metadata, so its cost grows with the header; the others' does not.

Routes, each producing the float32 presentation values of every file:

- bare pydicom: ``pydicom.dcmread(path).pixel_array * RescaleSlope + RescaleIntercept`` (the floor).
- MONAI default: ``LoadImage(reader="PydicomReader", image_only=True)`` (MONAI's pydicom reader; it
  converts every header to JSON metadata).
- sitecal: ``sitecal.inference.transforms.dicom_loader()``, i.e. ``LoadImage`` with
  ``sitecal.inference.DicomImageReader`` (what the pipeline's MONAI ``Dataset`` runs).

The first file of each route is read once untimed (imports, plugin discovery). Targets (issue 4):
sitecal >= 5x MONAI's default reader and >= 0.8x bare pydicom.

Run:  python benchmarks/bench_reader.py            (N = 300)
      python benchmarks/bench_reader.py --quick    (N = 60)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pydicom

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _ct_files import write_ct_files


def _bare(path: Path) -> np.ndarray:
    ds = pydicom.dcmread(path)
    return (ds.pixel_array.astype(np.float64) * float(ds.RescaleSlope) + float(ds.RescaleIntercept)).astype(
        np.float32
    )


def _time(read: Callable[[str], object], paths: list[Path], repeats: int) -> tuple[float, object]:
    read(str(paths[0]))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for path in paths:
            last = read(str(path))
        best = min(best, time.perf_counter() - start)
    return best, last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3, help="best of this many passes (default 3)")
    parser.add_argument("--quick", action="store_true", help="60 files, 1 pass")
    args = parser.parse_args()
    n, repeats = (60, 1) if args.quick else (args.files, args.repeats)

    import monai.transforms as mt

    from sitecal.inference.transforms import dicom_loader

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        monai_default = mt.LoadImage(reader="PydicomReader", image_only=True)
    sitecal = dicom_loader()
    rows = []
    for label, extra in (("minimal header", 0), ("clinical-size header", 250)):
        with tempfile.TemporaryDirectory() as tmp:
            paths = write_ct_files(Path(tmp), n, header_elements=extra)
            bare_s, bare_last = _time(_bare, paths, repeats)
            sitecal_s, sitecal_last = _time(sitecal, paths, repeats)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                monai_s, monai_last = _time(monai_default, paths, repeats)
        # the same pixels: sitecal's array is (Rows, Columns); MONAI's reader transposes to (Columns, Rows)
        np.testing.assert_array_equal(np.asarray(sitecal_last), bare_last)
        np.testing.assert_array_equal(np.asarray(monai_last).T, bare_last)
        rows.append((label, bare_s, monai_s, sitecal_s))

    print(f"Pixel reading, {n} files of 512x512 int16 CT, best of {repeats} pass(es), one process")
    print()
    print("| files | route | time | files/s | vs bare pydicom |")
    print("| --- | --- | --- | --- | --- |")
    for label, bare_s, monai_s, sitecal_s in rows:
        for name, seconds in (
            ("bare pydicom (floor)", bare_s),
            ("MONAI LoadImage(PydicomReader)", monai_s),
            ("sitecal LoadImage(DicomImageReader)", sitecal_s),
        ):
            print(f"| {label} | {name} | {seconds:.2f} s | {n / seconds:.0f} | {bare_s / seconds:.2f}x |")
    print()
    for label, bare_s, monai_s, sitecal_s in rows:
        print(
            f"{label}: sitecal {monai_s / sitecal_s:.1f}x faster than MONAI's default reader (target >= 5x), "
            f"{bare_s / sitecal_s:.2f}x bare pydicom (target >= 0.8x)"
        )


if __name__ == "__main__":
    main()
