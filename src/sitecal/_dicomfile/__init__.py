"""Opening DICOM files as sites send them, and naming why pixel data cannot be decoded.

Both the header scan (:mod:`sitecal.cohort.scan`) and the pixel reader (:mod:`sitecal.inference.reader`)
open files here, so a file the scan admits is one the reader can open, by the same rules: only regular
files are opened (a FIFO would block the read forever, a device would never end), and what pydicom says
while reading (warnings and log records, which quote header values such as UIDs) is captured and never
reaches stderr or a log in clear.

Deflated files are inflated as they are parsed, within limits (:mod:`._deflated`), and what decoding an
image will hold in memory is counted from its header before anything decodes it (:mod:`._cost`).
"""

from __future__ import annotations

from sitecal._dicomfile._cost import (
    BYTES_PER_PIXEL_VALUE,
    DecodeCost,
    decode_cost,
    decoding_budget,
    over_budget,
)
from sitecal._dicomfile._errors import CorruptHeader, NotDicom, NotRegularFile
from sitecal._dicomfile._open import (
    ReadNotes,
    decode_failure,
    decoded_pixels,
    file_kind,
    has_identifying_elements,
    kind_of,
    open_dicom,
    open_regular,
    quiet_pydicom,
    transfer_syntax_name,
)

__all__ = [
    "BYTES_PER_PIXEL_VALUE",
    "CorruptHeader",
    "DecodeCost",
    "NotDicom",
    "NotRegularFile",
    "ReadNotes",
    "decode_cost",
    "decode_failure",
    "decoded_pixels",
    "decoding_budget",
    "file_kind",
    "has_identifying_elements",
    "kind_of",
    "open_dicom",
    "open_regular",
    "over_budget",
    "quiet_pydicom",
    "transfer_syntax_name",
]
