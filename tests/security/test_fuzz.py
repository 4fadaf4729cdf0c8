"""Fuzzing the two doors hostile input comes through: DICOM files and protocol YAML.

Each property says the same thing: whatever the bytes, the result is a value or one of sitecal's own
errors (an exclusion reason, a ProtocolError naming the file), never a traceback of another type, and
never a hang. Hypothesis runs derandomised (tests/conftest.py), so CI sees the same examples every time;
``HYPOTHESIS_PROFILE=explore`` searches afresh.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import numpy as np
import pydicom
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydicom.dataset import FileMetaDataset
from pydicom.uid import ExplicitVRLittleEndian, SecondaryCaptureImageStorage
from tests.conftest import DEMO_PROTOCOL

from sitecal.cohort.scan import Unusable, read_header
from sitecal.errors import DicomError, ProtocolError
from sitecal.inference.reader import DicomImageReader
from sitecal.protocol import load_protocol

FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
KEYWORDS = [
    "SOPInstanceUID",
    "StudyInstanceUID",
    "SeriesInstanceUID",
    "PatientID",
    "AccessionNumber",
    "InstanceNumber",
    "SeriesNumber",
    "Modality",
    "Manufacturer",
    "ManufacturerModelName",
    "PatientSex",
    "PatientAge",
    "StudyDate",
    "PatientBirthDate",
    "NumberOfFrames",
]


def _valid_file() -> bytes:
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = SecondaryCaptureImageStorage
    meta.MediaStorageSOPInstanceUID = "1.2.826.0.1.3680043.8.498.1"
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = pydicom.Dataset()
    ds.file_meta = meta
    ds.SOPClassUID, ds.SOPInstanceUID = meta.MediaStorageSOPClassUID, meta.MediaStorageSOPInstanceUID
    ds.StudyInstanceUID = "1.2.826.0.1.3680043.8.498.2"
    ds.SeriesInstanceUID = "1.2.826.0.1.3680043.8.498.3"
    ds.PatientID, ds.PatientSex, ds.PatientAge, ds.Manufacturer = "PID123", "F", "054Y", "SIEMENS"
    ds.Modality, ds.InstanceNumber = "CR", 1
    ds.Rows, ds.Columns = 8, 8
    ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 12, 11, 0
    ds.RescaleSlope, ds.RescaleIntercept = 1, 0
    ds.PixelData = (np.arange(64, dtype=np.uint16) * 60).tobytes()
    buffer = io.BytesIO()
    ds.save_as(buffer, enforce_file_format=True)
    return buffer.getvalue()


VALID = _valid_file()


@st.composite
def mutated_files(draw: st.DrawFn) -> bytes:
    """A valid file with bytes overwritten, inserted or cut, anywhere (header and pixel data alike)."""
    data = bytearray(VALID)
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["overwrite", "insert", "truncate"]))
        at = draw(st.integers(0, len(data) - 1))
        chunk = draw(st.binary(min_size=1, max_size=16))
        if kind == "overwrite":
            data[at : at + len(chunk)] = chunk
        elif kind == "insert":
            data[at:at] = chunk
        else:
            del data[at:]
            if not data:
                break
    return bytes(data)


@st.composite
def odd_headers(draw: st.DrawFn) -> bytes:
    """A valid file whose header values are replaced by arbitrary text or bytes, VR kept."""
    ds = pydicom.dcmread(io.BytesIO(VALID))
    image_keywords = ["Rows", "Columns", "BitsAllocated", "RescaleSlope", "PhotometricInterpretation"]
    keywords = draw(st.lists(st.sampled_from(KEYWORDS + image_keywords), max_size=6, unique=True))
    for keyword in keywords:
        value = draw(
            st.one_of(st.text(max_size=80), st.binary(max_size=80).map(lambda b: b.decode("latin-1")))
        )
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                setattr(ds, keyword, value)
        except Exception:  # pydicom refuses some values outright; that is not what is fuzzed
            continue
    buffer = io.BytesIO()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pydicom's notes on odd values while writing them
            ds.save_as(buffer, enforce_file_format=True)
    except Exception:  # a value pydicom cannot write: fuzz the valid file instead
        return VALID
    return buffer.getvalue()


def _check_file(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "fuzz.dcm"
    path.write_bytes(data)
    outcome = read_header(path, KEYWORDS)
    assert isinstance(outcome, (dict, Unusable))
    if isinstance(outcome, dict):
        reader = DicomImageReader()
        try:
            image = reader.read(str(path))
            pixels, _ = reader.get_data(image)
        except DicomError as exc:
            assert str(exc)  # a reason, to be an exclusion
        else:
            assert np.asarray(pixels).size >= 1


@pytest.mark.timeout(240)
@FUZZ
@given(data=mutated_files())
def test_mutated_dicom_is_a_value_or_a_reason(tmp_path: Path, data: bytes) -> None:
    _check_file(tmp_path, data)


@pytest.mark.timeout(240)
@FUZZ
@given(data=odd_headers())
def test_odd_header_values_are_a_value_or_a_reason(tmp_path: Path, data: bytes) -> None:
    _check_file(tmp_path, data)


# -- protocol YAML ---------------------------------------------------------------------------------------

BASE = yaml.safe_load(DEMO_PROTOCOL.read_text())
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True),
    st.text(max_size=30),
    st.lists(st.integers(-5, 5), max_size=3),
    st.dictionaries(st.text(max_size=8), st.integers(), max_size=2),
)


def _paths(node: object, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += _paths(value, (*prefix, i))
    return out


PATHS = [p for p in _paths(BASE) if p]


@st.composite
def mutated_protocols(draw: st.DrawFn) -> str:
    """The demo protocol with values replaced by values of other types, keys renamed or removed."""
    import copy

    protocol = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(1, 4))):
        path = draw(st.sampled_from(PATHS))
        parent = protocol
        try:
            for part in path[:-1]:
                parent = parent[part]
            action = draw(st.sampled_from(["replace", "delete", "rename"]))
            if action == "replace":
                parent[path[-1]] = draw(SCALARS)
            elif action == "delete":
                del parent[path[-1]]
            elif isinstance(parent, dict):
                parent[draw(st.text(min_size=1, max_size=12))] = parent.pop(path[-1])
        except (KeyError, IndexError, TypeError):
            continue
    return yaml.safe_dump(protocol, sort_keys=False, allow_unicode=True)


@st.composite
def garbled_yaml(draw: st.DrawFn) -> str:
    """The demo protocol's text with characters inserted or removed (indentation, colons, anchors)."""
    text = DEMO_PROTOCOL.read_text()
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, len(text)))
        insert = draw(
            st.sampled_from([":", "- ", "&a ", "*a", "!!", "{", "[", "'", '"', "\t", "  ", "\n", "%"])
        )
        text = text[:at] + insert + text[at:] if draw(st.booleans()) else text[:at] + text[at + 2 :]
    return text


def _check_protocol(tmp_path: Path, text: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        load_protocol(path)
    except ProtocolError as exc:
        assert str(exc).startswith(str(path)), str(exc)


@pytest.mark.timeout(240)
@FUZZ
@given(text=mutated_protocols())
def test_mutated_protocol_loads_or_names_the_problem(tmp_path: Path, text: str) -> None:
    _check_protocol(tmp_path, text)


@pytest.mark.timeout(240)
@FUZZ
@given(text=garbled_yaml())
def test_garbled_yaml_loads_or_names_the_problem(tmp_path: Path, text: str) -> None:
    _check_protocol(tmp_path, text)
