"""Where a run took its protocol's paths from, recorded in its folder so that the folder stands alone.

A protocol's relative paths (the DICOM folder, the labels, the model, the key file, the archive's
credentials and TLS files) are taken from the folder the protocol file was in. From a run folder that
folder cannot always be found again: ``report.output_dir: ../reports``, as the demo's, leads out of it.
So the run records it when it makes the folder: ``resolved.json`` holds the protocol file's absolute path
as the run read it, and is sealed with the run's results (:mod:`sitecal._seal`).

:func:`run_protocol_of` loads a run folder's own ``protocol.yaml`` with its paths taken as the run took
them; ``export``, ``send`` and the search for the folder's key go through it, and ``--protocol`` still
overrides it. The record comes from a folder anyone may have written to, so it is taken on no trust: it must
be the file the seal lists, well formed and absolute, and what is found through it is checked in turn (the
model against the sha256 the run calibrated, the key against the seal's fingerprint). A folder written
before the record existed falls back to finding the protocol's folder from ``report.output_dir``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sitecal._io import write_json_atomic
from sitecal._seal import Seal, read_seal
from sitecal.errors import DataError, SealError
from sitecal.protocol import DicomwebDestination, DimseDestination, LoadedProtocol, load_protocol

__all__ = [
    "RESOLVED",
    "Resolved",
    "read_resolved",
    "run_protocol_of",
    "sealed_protocol",
    "send_destination",
    "write_resolved",
]

#: The record's file in the run folder.
RESOLVED = "resolved.json"
_FORMAT = "sitecal resolved paths"
_VERSION = 1
#: Bounds of a record read back: one path, well under a kilobyte.
_MAX_BYTES = 64 << 10
_MAX_PATH = 4096
_REMEDY = "Restore the folder from its archive, or pass --protocol with the protocol file the run used."


@dataclass(frozen=True)
class Resolved:
    """What ``resolved.json`` records: the protocol file as the run read it (an absolute path).

    Its folder is the one the protocol's relative paths were taken from.
    """

    protocol_file: Path

    def to_dict(self) -> dict[str, Any]:
        """The document as written."""
        return {"format": _FORMAT, "version": _VERSION, "protocol_file": str(self.protocol_file)}

    @classmethod
    def from_dict(cls, data: Any, where: Path) -> Resolved:
        """The record read back, refused (naming ``where``) unless it is what a run writes."""
        if not isinstance(data, dict) or data.get("format") != _FORMAT or data.get("version") != _VERSION:
            raise DataError(f"{where}: not a record sitecal {_FORMAT!r} version {_VERSION}. {_REMEDY}")
        value = data.get("protocol_file")
        if (
            not isinstance(value, str)
            or not 0 < len(value) <= _MAX_PATH
            or "\0" in value
            or not Path(value).is_absolute()
        ):
            raise DataError(f"{where}: protocol_file: expected an absolute path. {_REMEDY}")
        return cls(protocol_file=Path(value))


def write_resolved(folder: Path, loaded: LoadedProtocol) -> None:
    """Record in ``folder`` where ``loaded``'s relative paths are taken from (before the run seals it)."""
    # absolute, as LoadedProtocol.resolve takes its paths from it (load_protocol resolved it already)
    write_json_atomic(folder / RESOLVED, Resolved(Path(loaded.path).resolve()).to_dict())


def read_resolved(folder: Path, seal: Seal | None = None) -> Resolved | None:
    """The folder's record, checked against its seal; ``None`` when the seal lists none (an older run).

    With ``seal`` (verified) the bytes are checked against it; without (the key is still being looked
    for), against the hash the seal lists, which is enough to refuse an edited record.
    """
    path = folder / RESOLVED
    if seal is not None:
        return None if RESOLVED not in seal.files else _parse(seal.read_bytes(RESOLVED), path)
    listed = read_seal(folder)["files"].get(RESOLVED)
    if listed is None:
        return None  # a record the seal does not list is an added file: the seal's check refuses it
    try:
        data = path.read_bytes() if path.is_file() and not path.is_symlink() else None
    except OSError:
        data = None
    if data is None or not hmac.compare_digest(hashlib.sha256(data).hexdigest(), str(listed)):
        raise SealError(
            f"{path}: missing, or edited after the run sealed it (not the record its seal lists), so the "
            "paths it records cannot be trusted. Restore the folder from its archive, or run the protocol "
            "again."
        )
    return _parse(data, path)


def _parse(data: bytes, path: Path) -> Resolved:
    """The record's bytes as a :class:`Resolved`, bounded and checked."""
    if len(data) > _MAX_BYTES:
        raise DataError(f"{path}: {len(data)} bytes, far more than a run writes. {_REMEDY}")
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise DataError(f"{path}: not JSON. {_REMEDY}") from None
    return Resolved.from_dict(document, path)


def run_protocol_of(
    folder: Path, protocol: Path | None = None, *, seal: Seal | None = None
) -> LoadedProtocol:
    """The protocol of a run folder: ``protocol`` when given, else the run's own, paths as the run took them.

    The run's own ``protocol.yaml`` is resolved from the folder ``resolved.json`` records; a folder
    without the record (written by an earlier sitecal) as
    :func:`_found_from_output_dir` finds it from ``report.output_dir``. With ``seal``, the
    protocol read must be the one it lists.

    Raises
    ------
    SealError
        An edited ``resolved.json`` or ``protocol.yaml``.
    DataError
        A record that is not what a run writes, or an older folder whose protocol's folder cannot be found.
    """
    if protocol is not None:
        return load_protocol(protocol)
    folder = Path(folder)
    recorded = read_resolved(folder, seal)
    if recorded is None:
        loaded = _found_from_output_dir(folder)
    else:
        loaded = replace(load_protocol(folder / "protocol.yaml"), path=recorded.protocol_file)
    if seal is not None:
        _check_sealed(folder, loaded, seal)
    return loaded


def _found_from_output_dir(folder: Path) -> LoadedProtocol:
    """The run's own ``protocol.yaml`` of a folder without ``resolved.json`` (an earlier sitecal's run).

    Its relative paths are taken from the folder the protocol was in, found back from
    ``report.output_dir`` (``<protocol folder>/<output_dir>/<run>``).

    Raises
    ------
    DataError
        When ``report.output_dir`` leads out of the protocol's folder (``..``), so that its folder cannot
        be found back: pass ``--protocol``.
    """
    loaded = load_protocol(folder / "protocol.yaml")
    output_dir = Path(loaded.protocol.report.output_dir).expanduser()
    if ".." in output_dir.parts:
        raise DataError(
            f"{folder / 'protocol.yaml'}: report.output_dir leads out of the protocol's folder, so its "
            "relative paths cannot be found from the run folder: pass --protocol with the protocol file."
        )
    home = folder.resolve().parent
    if not output_dir.is_absolute():
        for _ in output_dir.parts:
            home = home.parent
    return replace(loaded, path=home / "protocol.yaml")


def sealed_protocol(folder: Path, seal: Seal) -> LoadedProtocol:
    """The run's own ``protocol.yaml``, the one ``seal`` lists, for what needs none of its paths.

    Raises
    ------
    SealError
        A protocol other than the sealed one.
    """
    loaded = load_protocol(Path(folder) / "protocol.yaml")
    _check_sealed(Path(folder), loaded, seal)
    return loaded


def _check_sealed(folder: Path, loaded: LoadedProtocol, seal: Seal) -> None:
    """Refuse a protocol read from ``folder`` that is not the one its (verified) seal lists."""
    listed = seal.files.get("protocol.yaml")
    if listed is None or not hmac.compare_digest(loaded.sha256, listed):
        raise SealError(
            f"{folder / 'protocol.yaml'}: edited after the run sealed it (not the protocol its seal lists). "
            f"{_REMEDY}"
        )


def send_destination(
    folder: Path, protocol: Path | None, seal: Seal
) -> tuple[DicomwebDestination | DimseDestination, LoadedProtocol]:
    """The ``report.send_to`` of ``protocol`` (default: the run's own), and the protocol to resolve its files.

    Raises
    ------
    DataError
        No ``report.send_to`` in the protocol: the message says to set one or pass ``--protocol``.
    """
    loaded = run_protocol_of(folder, protocol, seal=seal)
    destination = loaded.protocol.report.send_to
    if destination is None:
        raise DataError(
            f"{loaded.path if protocol is not None else folder / 'protocol.yaml'}: report.send_to is not "
            "set: name the archive with --to (a DICOMweb URL, or dimse://AE_TITLE@host:port), or set "
            "report.send_to (dicomweb: URL, or dimse: {host, port, ae_title}) and pass --protocol."
        )
    return destination, loaded
