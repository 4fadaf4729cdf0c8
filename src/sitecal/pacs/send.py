"""Send a run's ``report.dcm`` to the archive of ``report.send_to``: STOW-RS or C-STORE, reply checked.

:func:`send_report` sends the file, reads the archive's reply (STOW-RS: the instance is among the
referenced ones and none failed; C-STORE: a success or warning status) and records the attempt, sent
or not, in the run folder: a line in ``run.log`` and an entry in ``sent.json`` (when, where, how, the
archive's answer, the report's document ID and file hash; no UID). A failure raises
:class:`~sitecal.errors.DataError` with what the archive said and what to check.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sitecal._io import write_json_atomic
from sitecal.errors import DataError
from sitecal.pacs._credentials import load_credentials, missing_tls_files
from sitecal.pacs._peer import PacsError
from sitecal.protocol import DicomwebDestination, DimseDestination

if TYPE_CHECKING:
    pass

__all__ = ["SENT_LOG", "destination_problems", "send_report"]

logger = logging.getLogger(__name__)

#: Encapsulated PDF Storage, the SOP class of ``report.dcm`` (``report.dicom_pdf``, a layer above).
ENCAPSULATED_PDF = "1.2.840.10008.5.1.4.1.1.104.1"
#: The run folder's record of every send.
SENT_LOG = "sent.json"
_FIELD = "report.send_to"
#: C-STORE statuses after which the archive holds the instance (success, and the warnings of PS3.4 B.2.3).
_STORED = {0x0000: "stored", 0xB000: "stored, elements coerced", 0xB006: "stored, elements discarded",
           0xB007: "stored, data set does not match SOP class"}  # fmt: skip


def _describe(destination: DicomwebDestination | DimseDestination) -> tuple[str, str]:
    if isinstance(destination, DicomwebDestination):
        return "STOW-RS", destination.dicomweb
    peer = destination.dimse
    return "C-STORE", f"{peer.ae_title}@{peer.host}:{peer.port}"


def _credentials(destination: DicomwebDestination | DimseDestination, resolve: Callable[[str], Path]) -> Any:
    path = None if destination.credentials_file is None else resolve(destination.credentials_file)
    return load_credentials(path, f"{_FIELD}.credentials_file")


def send_report(
    folder: Path,
    destination: DicomwebDestination | DimseDestination,
    resolve: Callable[[str], Path],
    *,
    name: str = "report.dcm",
) -> dict[str, Any]:
    """Send ``folder/name`` to ``destination``; the record written to ``sent.json``.

    ``name`` is ``report.dcm`` for a run folder, ``monitoring.dcm`` for a monitoring folder.

    Raises
    ------
    DataError
        When the folder has no readable report, or the archive did not store it (the attempt is
        recorded all the same).
    """
    import pydicom

    path = folder / name
    try:
        data = path.read_bytes()
        dataset = pydicom.dcmread(path)
    except (OSError, pydicom.errors.InvalidDicomError) as exc:
        raise DataError(
            f"{path}: no readable {name} in this folder ({type(exc).__name__}). Render it with "
            f"`sitecal report {folder}`."
        ) from None
    how, where = _describe(destination)
    record: dict[str, Any] = {
        "sent_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "how": how,
        "to": where,
        "file": name,
        "document_id": str(dataset.get("StudyID", "")),
        "report_sha256": hashlib.sha256(data).hexdigest(),
    }
    try:
        credentials = _credentials(destination, resolve)
        if isinstance(destination, DicomwebDestination):
            answer = _stow(destination, credentials, resolve, dataset)
        else:
            answer = _c_store(destination, credentials, resolve, path, dataset)
    except (PacsError, DataError) as exc:
        record |= {"outcome": "not stored", "reason": str(exc)}
        _record(folder, record)
        logger.error("%s not sent to %s by %s: %s", name, where, how, exc)
        raise DataError(f"{_FIELD}: {name} not sent. {exc}") from None
    record |= {"outcome": "stored", "answer": answer}
    _record(folder, record)
    logger.info("%s sent to %s by %s: %s", name, where, how, answer)
    return record


def _stow(
    destination: DicomwebDestination, credentials: Any, resolve: Callable[[str], Path], dataset: Any
) -> str:
    from sitecal.pacs._dicomweb import DicomwebPeer

    with DicomwebPeer(destination, credentials, resolve, _FIELD) as peer:
        reply = peer.store(dataset)
    failed = list(getattr(reply, "FailedSOPSequence", None) or [])
    if failed:
        reason = failed[0].get("FailureReason")
        code = "" if reason is None else f" (failure reason 0x{int(reason):04X})"
        raise PacsError(f"STOW-RS: the server refused the instance{code}; its log says why.")
    referenced = [
        str(item.get("ReferencedSOPInstanceUID", ""))
        for item in getattr(reply, "ReferencedSOPSequence", None) or []
    ]
    if str(dataset.SOPInstanceUID) not in referenced:
        raise PacsError("STOW-RS: the server's reply does not list the report among the stored instances.")
    return "HTTP 200, the report is among the stored instances"


def _c_store(
    destination: DimseDestination,
    credentials: Any,
    resolve: Callable[[str], Path],
    path: Path,
    dataset: Any,
) -> str:
    from sitecal.pacs._association import associate, check_reachable, status_problem

    check_reachable(destination, "C-STORE association", _FIELD, resolve)  # why a connection fails
    assoc = associate(
        destination,
        credentials,
        resolve,
        what="C-STORE association",
        send=[(str(dataset.SOPClassUID), str(dataset.file_meta.TransferSyntaxUID))],
        field=_FIELD,
    )
    try:
        status = assoc.send_c_store(path)
    finally:
        if assoc.is_established:
            assoc.release()
    code = getattr(status, "Status", None)
    if code is None:
        raise PacsError(
            f"C-STORE: no answer from {destination.dimse.ae_title} within {_FIELD}.timeout_s "
            f"({destination.timeout_s:g} s), or it aborted the association."
        )
    if int(code) not in _STORED:
        raise PacsError(f"C-STORE: the archive answered {status_problem(int(code))}; its log says why.")
    return f"{status_problem(int(code))}, {_STORED[int(code)]}"


def _record(folder: Path, record: dict[str, Any]) -> None:
    path = folder / SENT_LOG
    try:
        earlier = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []
    except (OSError, ValueError):
        earlier = []
    entries = earlier if isinstance(earlier, list) else []
    write_json_atomic(path, [*entries, record])


def destination_problems(
    destination: DicomwebDestination | DimseDestination, resolve: Callable[[str], Path]
) -> list[str]:
    """What would keep ``report.dcm`` from being sent after the run, found in seconds (for preflight).

    Reads the credentials and TLS files, then asks the archive once: DICOMweb, a study search limited to
    one answer; DIMSE, a TCP connection and an association offering Encapsulated PDF Storage.
    """
    problems = missing_tls_files(destination.tls, resolve, _FIELD)
    try:
        credentials = _credentials(destination, resolve)
    except DataError as exc:
        return [*problems, str(exc)]
    if problems:
        return problems
    try:
        if isinstance(destination, DicomwebDestination):
            from sitecal.pacs._dicomweb import DicomwebPeer

            with DicomwebPeer(destination, credentials, resolve, _FIELD) as peer:
                peer.probe()
        else:
            from sitecal.pacs._association import associate, check_reachable

            check_reachable(destination, "C-STORE association", _FIELD, resolve)
            assoc = associate(
                destination,
                credentials,
                resolve,
                what="C-STORE association",
                send=[(ENCAPSULATED_PDF, "1.2.840.10008.1.2.1")],
                field=_FIELD,
            )
            assoc.release()
    except PacsError as exc:
        return [f"{_FIELD}: {exc}"]
    return []
