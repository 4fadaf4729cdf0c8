"""What one image may cost: decoding memory within a stated budget, deflated headers read like plain ones.

A small compressed file can declare an image of gigabytes, and a few kilobytes of deflate can inflate to
any size. Each case runs where it can be measured: the memory bounds in a child process (peak RSS from
``/proc/self/status``, or an address-space limit that turns an unbounded read into a MemoryError), the
time bounds on the clock. The bounds would fail on the code before these limits: the RLE image at the
pixel limit peaked at about 21 bytes a value (5.3 GiB for 16384 x 16384), and a deflated header read
waited out the scan's 60 s timeout.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
import zlib
from pathlib import Path

import numpy as np
import pydicom
import pytest
from pydicom.dataset import FileMetaDataset
from pydicom.encaps import encapsulate
from pydicom.filebase import DicomBytesIO
from pydicom.filewriter import write_dataset
from pydicom.uid import (
    DeflatedExplicitVRLittleEndian,
    ExplicitVRLittleEndian,
    RLELossless,
    SecondaryCaptureImageStorage,
)

import sitecal._dicomfile._deflated as deflated
from sitecal._dicomfile import decode_cost, open_dicom
from sitecal.cohort.scan import BASE_KEYWORDS, Unusable, read_header, scan_folder
from sitecal.errors import DataError, DicomError
from sitecal.inference.reader import DicomImageReader, apply_presentation, presentation_values, window

MIB = 1 << 20
ROOT = Path(__file__).resolve().parents[2]


def _dataset(rows: int, columns: int, bits: int, syntax: str) -> pydicom.Dataset:
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = SecondaryCaptureImageStorage
    meta.MediaStorageSOPInstanceUID = "1.2.826.0.1.3680043.8.498.30.1"
    meta.TransferSyntaxUID = syntax
    ds = pydicom.Dataset()
    ds.file_meta = meta
    ds.SOPClassUID, ds.SOPInstanceUID = meta.MediaStorageSOPClassUID, meta.MediaStorageSOPInstanceUID
    ds.StudyInstanceUID = "1.2.826.0.1.3680043.8.498.30.2"
    ds.Modality = "OT"
    ds.Rows, ds.Columns = rows, columns
    ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = bits, bits, bits - 1, 0
    return ds


def _rle_frame(values: int, bytes_per_sample: int, byte: int) -> bytes:
    """One RLE frame of ``values`` equal pixels: a PackBits segment per byte plane, 2 bytes per 128 values."""
    segment = bytes([0x81, byte]) * (values // 128)  # "repeat the next byte 128 times"
    if values % 128:
        segment += bytes([257 - values % 128, byte]) if values % 128 > 1 else bytes([0, byte])
    segment += b"\0" * (len(segment) % 2)
    offsets = [64 + i * len(segment) for i in range(bytes_per_sample)]
    header = np.array([bytes_per_sample, *offsets, *[0] * (15 - bytes_per_sample)], dtype="<u4").tobytes()
    return header + segment * bytes_per_sample


def rle_image(path: Path, rows: int, columns: int, bits: int, byte: int = 7) -> Path:
    """An RLE Lossless image of equal pixels: 16384 x 16384 at 8 bits is a 4 MiB file."""
    ds = _dataset(rows, columns, bits, RLELossless)
    ds.PixelData = encapsulate([_rle_frame(rows * columns, bits // 8, byte)])
    ds["PixelData"].VR = "OB"
    ds.save_as(path, enforce_file_format=True)
    return path


def native_image(path: Path, rows: int, columns: int) -> Path:
    """An uncompressed 8-bit image of a diagonal ramp (not constant: ScaleIntensity works on it in full)."""
    ds = _dataset(rows, columns, 8, ExplicitVRLittleEndian)
    ramp = np.add.outer(np.arange(rows, dtype=np.uint32), np.arange(columns, dtype=np.uint32)) % 256
    ds.PixelData = ramp.astype(np.uint8).tobytes()
    ds.save_as(path, enforce_file_format=True)
    return path


def _private_ob(group: int, length: int) -> bytes:
    """The header of a private OB element (``group``,1010) of ``length`` bytes, explicit VR little endian."""
    return group.to_bytes(2, "little") + b"\x10\x10OB\0\0" + length.to_bytes(4, "little")


def _piece(data: bytes) -> bytes:
    """``data`` as deflate blocks that end byte-aligned with no history: pieces can be concatenated."""
    packer = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush(zlib.Z_FULL_FLUSH)


#: One MiB of zeros as a piece: n MiB of zeros deflate to n copies of it, written in no time.
_ZERO_MIB = _piece(b"\0" * MIB)
#: The final (empty) block that ends a deflate stream.
_END = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS).flush()


def _deflate(path: Path, meta: bytes, parts: list[bytes | int]) -> Path:
    """Write ``meta`` then ``parts`` (bytes, or a count of zero bytes) as one deflate stream."""
    with path.open("wb") as out:
        out.write(meta)
        for part in parts:
            if isinstance(part, bytes):
                out.write(_piece(part))
            else:
                out.write(_ZERO_MIB * (part // MIB) + _piece(b"\0" * (part % MIB)))
        out.write(_END)
    return path


def deflated_image(path: Path, rows: int, columns: int, *, before: int = 0, after: int = 0) -> Path:
    """A deflated 16-bit image of zeros, deflated here in steps (pydicom would hold it whole, twice).

    ``before`` and ``after`` add a private OB element of that many zeros before or after the pixel data.
    """
    ds = _dataset(1, 1, 16, DeflatedExplicitVRLittleEndian)
    ds.PixelData = b"\0\0"
    ds.save_as(path, enforce_file_format=True)  # for its File Meta Information
    meta = path.read_bytes()[: 144 + int.from_bytes(path.read_bytes()[140:144], "little")]
    del ds.PixelData
    ds.Rows, ds.Columns = rows, columns
    body = DicomBytesIO()
    body.is_little_endian, body.is_implicit_VR = True, False
    write_dataset(body, ds)
    pixels = rows * columns * 2
    parts: list[bytes | int] = [body.getvalue()]
    if before:
        parts += [_private_ob(0x0009, before), before]
    parts += [b"\xe0\x7f\x10\x00OW\0\0" + pixels.to_bytes(4, "little"), pixels]
    if after:
        parts += [_private_ob(0x7FE1, after), after]
    return _deflate(path, meta, parts)


def deflate_bomb(path: Path, zeros: int) -> Path:
    """The File Meta Information of a deflated file, then a deflate stream of nothing but zeros."""
    deflated_image(path, 1, 1)
    whole = path.read_bytes()
    return _deflate(path, whole[: 144 + int.from_bytes(whole[140:144], "little")], [zeros])


def _child(script: str, *args: object, timeout: float = 240) -> dict:
    """Run ``script`` in a fresh interpreter; it prints one JSON line, the last of its output."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------- decoding

#: The reader's chain in a child: each case reads one file through LoadImage(DicomImageReader) and the demo
#: protocol's transforms (or, for ``scale_first``, ScaleIntensity on the full-size image before Resize); the
#: peak RSS it adds over the RSS before it (the high-water mark reset through /proc) is reported in MiB.
_CHAIN = """
import json, re, sys
from pathlib import Path
from sitecal.errors import DicomError
from sitecal.inference.transforms import build_transforms
from sitecal.protocol import TransformSettings as T

def status(key):
    return int(re.search(key + r":\\s+(\\d+)", Path("/proc/self/status").read_text()).group(1)) / 1024

def start():
    # reset the high-water mark to the present RSS (Linux 4.0+), else count from the peak so far: VmHWM,
    # not ru_maxrss, which carries the pytest worker's high-water mark over exec
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return status("VmRSS"), lambda: status("VmHWM")
    except OSError:
        return status("VmHWM"), lambda: status("VmHWM")

resize_first = [
    T(name="EnsureChannelFirst", args={"channel_dim": "no_channel"}),
    T(name="Resize", args={"spatial_size": [64, 64]}),
    T(name="NormalizeIntensity", args={}),
]
scale_first = [
    T(name="ScaleIntensity", args={}),
    T(name="EnsureChannelFirst", args={"channel_dim": "no_channel"}),
    T(name="Resize", args={"spatial_size": [64, 64]}),
]
results = {}
for case in sys.argv[1:]:
    name, path, limit = case.split("=")
    chain = build_transforms(scale_first if name.startswith("scale") else resize_first, max_values=int(limit))
    chain(sys.argv[1].split("=")[1])  # warm: the first call loads MONAI's lazy parts
    before, peak = start()
    try:
        out = chain(path)
        outcome = [list(out.shape), float(out.abs().max())]
    except Exception as exc:
        cause = exc
        while cause.__cause__ is not None and not isinstance(cause, DicomError):
            cause = cause.__cause__
        outcome = str(cause)
    results[name] = {"outcome": outcome, "added_mib": peak() - before}
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def chain_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The reader's chain on a small image (warm-up), images over budget, and two within it."""
    folder = tmp_path_factory.mktemp("images")
    small = rle_image(folder / "small.dcm", 64, 64, 8)
    over16 = rle_image(folder / "over16.dcm", 16384, 16384, 16)
    over32 = rle_image(folder / "over32.dcm", 16384, 14336, 32)
    at_limit = rle_image(folder / "at-limit.dcm", 4096, 4096, 8)
    scaled = native_image(folder / "scaled.dcm", 2560, 2560)
    # in rising order of memory: where the high-water mark cannot be reset, a peak shows only above the last
    return _child(
        _CHAIN,
        f"small={small}={2**28}",
        f"over16={over16}={2**28}",
        f"over32={over32}={2**28}",
        f"scale_over={scaled}={2**24}",
        f"at_limit={at_limit}={2**24}",
        f"scale_within={scaled}={2**25}",
    )


@pytest.mark.timeout(300)
def test_an_image_over_its_decoding_budget_is_refused_before_decoding(chain_run: dict) -> None:
    # 16384 x 16384 x 16 bits: exactly the pixel limit, but 8 MiB read + 512 MiB decoded + 1 GiB of float32
    # is above 2**28 x 6 bytes; decoding it would take 1.5 GiB, the refusal a few MiB
    over16 = chain_run["over16"]
    assert over16["outcome"] == (
        "image too large to decode: it would hold 1,545 MiB (9 MiB read, 512 MiB decoded, 1,024 MiB as "
        "float32), above the 1,536 MiB that the limit of 268435456 pixel values allows (6 bytes a value); "
        "it was not decoded. Raise inputs.max_pixels_per_image in the protocol if such images are expected."
    )
    assert over16["added_mib"] < 64
    # 32 bits: under the pixel limit (234,881,024 values), over the budget (4 + 4 bytes a value)
    assert chain_run["over32"]["outcome"].startswith(
        "image too large to decode: it would hold 1,807 MiB (15 MiB read, 896 MiB decoded, 896 MiB as "
        "float32)"
    )
    assert chain_run["over32"]["added_mib"] < 64


@pytest.mark.timeout(300)
def test_an_image_at_the_pixel_limit_peaks_within_its_stated_cost(chain_run: dict, tmp_path: Path) -> None:
    # 4096 x 4096 x 8 bits at a limit of 2**24 values: 256 KiB read, 16 MiB decoded, 64 MiB of float32
    # (the code before: about 21 bytes a value, 368 MiB measured)
    at_limit = chain_run["at_limit"]
    assert at_limit["outcome"] == [[1, 64, 64], 0.0]  # a constant image, normalised
    cost = decode_cost(open_dicom(rle_image(tmp_path / "same.dcm", 4096, 4096, 8)), 0)
    assert cost is not None and cost.total >> 20 == 80
    assert 64 < at_limit["added_mib"] <= cost.total / MIB + 16


@pytest.mark.timeout(300)
def test_transforms_on_the_full_size_image_are_counted_in_its_budget(chain_run: dict) -> None:
    # 2560 x 2560 x 8 bits, 25 MiB as float32: decoding holds 38 MiB (7 read, 7 decoded, 25 as float32),
    # but ScaleIntensity before Resize holds the image and 3.5 copies of it (4.5 x 25 MiB), above
    # 2**24 x 6 bytes = 96 MiB
    assert chain_run["scale_over"]["outcome"] == (
        "image too large to decode: it would hold 113 MiB (25 MiB as float32, 113 MiB in the protocol's "
        "transforms), above the 96 MiB that the limit of 16777216 pixel values allows (6 bytes a value); it "
        "was not decoded. Raise inputs.max_pixels_per_image in the protocol if such images are expected."
    )
    # within a budget twice as large, it peaks within what was counted (above what decoding alone holds)
    within = chain_run["scale_within"]
    assert within["outcome"][0] == [1, 64, 64]
    assert 75 < within["added_mib"] <= 113 + 16


def test_the_scan_counts_the_transforms_as_the_reader_does(tmp_path: Path) -> None:
    path = native_image(tmp_path / "scaled.dcm", 5120, 5120)
    assert read_header(path, BASE_KEYWORDS, max_pixels_per_image=2**26, transform_multiple=4.5) == Unusable(
        "image too large to decode: it would hold 450 MiB (100 MiB as float32, 450 MiB in the protocol's "
        "transforms), above the 384 MiB that the limit of 67108864 pixel values allows (6 bytes a value); "
        "raise inputs.max_pixels_per_image in the protocol to read it",
        "1.2.826.0.1.3680043.8.498.30.2",
    )
    assert not isinstance(read_header(path, BASE_KEYWORDS, max_pixels_per_image=2**26), Unusable)
    result = scan_folder(tmp_path, workers=1, max_pixels_per_image=2**26, transform_multiple=4.5)
    assert [e.reason[:27] for e in result.exclusions] == ["image too large to decode: "]
    with pytest.raises(DataError, match=r"'transform_multiple' parameter of scan_folder must be a number "):
        scan_folder(tmp_path, transform_multiple=0.5)


def test_the_scan_excludes_an_image_over_its_decoding_budget_with_its_reason(tmp_path: Path) -> None:
    over32 = rle_image(tmp_path / "over32.dcm", 16384, 14336, 32)
    started = time.monotonic()
    outcome = read_header(over32, BASE_KEYWORDS)
    assert time.monotonic() - started < 5
    # 234,881,024 values x (4 bytes decoded + 4 as float32) + the 15 MiB file, against 2**28 x 6 bytes
    assert outcome == Unusable(
        "image too large to decode: it would hold 1,807 MiB (15 MiB read, 896 MiB decoded, 896 MiB as "
        "float32), above the 1,536 MiB that the limit of 268435456 pixel values allows (6 bytes a value); "
        "raise inputs.max_pixels_per_image in the protocol to read it",
        "1.2.826.0.1.3680043.8.498.30.2",
    )
    # the same image at 8 bits costs 5 bytes a value: admitted
    assert not isinstance(
        read_header(rle_image(tmp_path / "ok.dcm", 16384, 14336, 8), BASE_KEYWORDS), Unusable
    )


def test_frames_beyond_those_declared_are_not_decoded(tmp_path: Path) -> None:
    # one frame declared, forty encapsulated: pydicom's default decodes and appends all forty (40 x the
    # memory its header declares); the reader decodes the one frame the budget was counted for
    ds = _dataset(512, 512, 8, RLELossless)
    ds.PixelData = encapsulate([_rle_frame(512 * 512, 1, 7)] * 40, has_bot=True)
    ds["PixelData"].VR = "OB"
    ds.save_as(tmp_path / "excess.dcm", enforce_file_format=True)
    with pytest.warns(UserWarning, match="40 frames have been found"):
        assert pydicom.dcmread(tmp_path / "excess.dcm").pixel_array.shape == (40, 512, 512)
    assert presentation_values(open_dicom(tmp_path / "excess.dcm")).shape == (512, 512)


# ------------------------------------------------------------------------------ the same values as before


def _reference(
    stored: np.ndarray, *, photometric: str, bits: int, slope: float, intercept: float
) -> np.ndarray:
    """The whole-array formula the reader used before it converted block by block."""
    values = stored.astype(np.float64)
    if photometric == "MONOCHROME1":
        values = float(2**bits - 1) - values
    return (values * slope + intercept).astype(np.float32)


@pytest.mark.parametrize("photometric", ["MONOCHROME1", "MONOCHROME2"])
def test_block_by_block_values_are_the_whole_array_values_bit_for_bit(photometric: str) -> None:
    # 1000 x 700 is several blocks, with a ragged last one; a slope that is not dyadic rounds in float64
    stored = np.random.default_rng(3).integers(0, 4096, size=(1000, 700)).astype(np.uint16)
    got = apply_presentation(stored, photometric=photometric, bits_stored=12, slope=0.37, intercept=-1024.5)
    want = _reference(stored, photometric=photometric, bits=12, slope=0.37, intercept=-1024.5)
    assert got.dtype == np.float32
    assert np.array_equal(got, want)


def test_windowed_values_are_the_whole_array_values_bit_for_bit(tmp_path: Path) -> None:
    ds = _dataset(900, 800, 16, ExplicitVRLittleEndian)
    stored = np.random.default_rng(4).integers(0, 4096, size=(900, 800)).astype(np.uint16)
    ds.PixelData = stored.tobytes()
    ds.RescaleSlope, ds.RescaleIntercept = 0.37, -1024.5
    ds.WindowCenter, ds.WindowWidth = 40.0, 400.0
    path = tmp_path / "windowed.dcm"
    ds.save_as(path, enforce_file_format=True)
    got = presentation_values(pydicom.dcmread(path), voi="window")
    want = window(stored.astype(np.float64) * 0.37 - 1024.5, 40.0, 400.0).astype(np.float32)
    assert np.array_equal(got, want)


# ------------------------------------------------------------------------------------------- deflated

#: A header read in a child under an address-space limit (the interpreter's own plus 256 MiB): inflating a
#: data set whole would raise MemoryError instead of giving the outcome.
_HEADER = """
import json, re, resource, sys, time
from pathlib import Path
from sitecal.cohort.scan import BASE_KEYWORDS, Unusable, read_header

size = int(re.search(r"VmSize:\\s+(\\d+)", Path("/proc/self/status").read_text()).group(1)) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + (256 << 20), resource.RLIM_INFINITY))
started = time.monotonic()
outcome = read_header(Path(sys.argv[1]), BASE_KEYWORDS)
seconds = time.monotonic() - started
outcome = outcome.reason if isinstance(outcome, Unusable) else outcome
print(json.dumps({"outcome": outcome, "seconds": seconds}))
"""


@pytest.mark.timeout(120)
def test_a_deflated_header_is_read_up_to_its_pixel_data(tmp_path: Path) -> None:
    # 8192 x 16384 x 16 bits: 256 MiB of pixels inflated, 256 KiB on disk; the header read inflates the header
    path = deflated_image(tmp_path / "deflated.dcm", 8192, 16384)
    assert path.stat().st_size < 1 * MIB
    result = _child(_HEADER, path)
    assert result["seconds"] < 5
    assert result["outcome"]["Rows"] == "8192" and result["outcome"]["Columns"] == "16384"
    assert result["outcome"]["SOPInstanceUID"] == "1.2.826.0.1.3680043.8.498.30.1"


@pytest.mark.timeout(120)
def test_a_deflate_bomb_of_zeros_is_excluded_at_once(tmp_path: Path) -> None:
    path = deflate_bomb(tmp_path / "bomb.dcm", 1 << 30)
    assert path.stat().st_size < 2 * MIB  # 1 GiB of zeros
    result = _child(_HEADER, path)
    assert result["outcome"] == (
        "corrupt DICOM header (the deflated data set does not start with an explicit-VR data element)"
    )
    assert result["seconds"] < 5


@pytest.mark.timeout(120)
def test_a_deflated_header_inflating_past_its_limit_is_excluded(tmp_path: Path) -> None:
    # a valid header, then a 1 GiB private OB value of zeros before the pixel data, 1 MiB on disk
    path = deflated_image(tmp_path / "bomb.dcm", 64, 64, before=1 << 30)
    assert path.stat().st_size < 2 * MIB
    result = _child(_HEADER, path)
    assert result["outcome"] == (
        "corrupt DICOM header (deflated data set inflates to more than 16 MiB before its pixel data: a "
        "decompression bomb, or a header far larger than any image's)"
    )
    assert result["seconds"] < 5


#: A whole read of a deflated file (the reader's) in a child, with the whole-read limit lowered to 64 MiB
#: and an address-space limit 256 MiB above the interpreter's: the read must stop at the limit.
_WHOLE = """
import json, re, resource, sys, time
from pathlib import Path
import sitecal._dicomfile as dicomfile
import sitecal._dicomfile._deflated as deflated

deflated.MAX_INFLATED_BYTES = 64 << 20
size = int(re.search(r"VmSize:\\s+(\\d+)", Path("/proc/self/status").read_text()).group(1)) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + (256 << 20), resource.RLIM_INFINITY))
started = time.monotonic()
try:
    dicomfile.open_dicom(sys.argv[1])
    outcome = "read"
except dicomfile.CorruptHeader as exc:
    outcome = str(exc)
print(json.dumps({"outcome": outcome, "seconds": time.monotonic() - started}))
"""


@pytest.mark.timeout(120)
def test_a_deflated_image_inflating_past_the_whole_read_limit_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the header is plausible (the scan admits it), but a 1 GiB private value follows the pixel data
    path = deflated_image(tmp_path / "bomb.dcm", 1024, 1024, after=1 << 30)
    assert not isinstance(read_header(path, BASE_KEYWORDS), Unusable)
    result = _child(_WHOLE, path)
    assert result["outcome"] == (
        "deflated data set inflates to more than 64 MiB: a decompression bomb, or an image far above any "
        "limit"
    )
    assert result["seconds"] < 5
    # the reader names it as the study's exclusion reason
    monkeypatch.setattr(deflated, "MAX_INFLATED_BYTES", 1 << 20)
    with pytest.raises(DicomError) as refused:
        DicomImageReader().read(str(path))
    assert str(refused.value) == (
        "corrupt DICOM file (deflated data set inflates to more than 1 MiB: a decompression bomb, or an "
        "image far above any limit)"
    )


def test_a_deflated_file_reads_whole_as_pydicom_reads_it(tmp_path: Path) -> None:
    from pydicom.data import get_testdata_file

    for path in (get_testdata_file("image_dfl.dcm"), deflated_image(tmp_path / "d.dcm", 300, 200)):
        ours, theirs = open_dicom(path), pydicom.dcmread(path)
        assert list(ours.keys()) == list(theirs.keys())
        assert all(ours[tag].value == theirs[tag].value for tag in theirs.keys())
        assert np.array_equal(presentation_values(ours), presentation_values(theirs))
    reader = DicomImageReader()
    array, _ = reader.get_data(reader.read(str(tmp_path / "d.dcm")))
    assert array.shape == (300, 200)


def test_a_truncated_deflated_file_is_truncated(tmp_path: Path) -> None:
    path = deflated_image(tmp_path / "cut.dcm", 300, 200)
    path.write_bytes(path.read_bytes()[:-40])
    with pytest.raises(EOFError):
        open_dicom(path)
    with pytest.raises(DicomError, match=r"^truncated file"):
        DicomImageReader().read(str(path))
