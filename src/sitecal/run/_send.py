"""``sitecal send FOLDER``: a finished run's ``report.dcm`` to an archive, and nothing else.

A monitoring folder (``sitecal monitor``) sends its ``monitoring.dcm`` the same way. The archive is
``report.send_to`` of the run's own protocol (or of ``--protocol``), or one named on the command line
with ``--to`` (a DICOMweb URL, or ``dimse://AE_TITLE@host:port``) for a run whose protocol names none:
the demo's, or a site that archives by hand.
"""

from __future__ import annotations

import io
import logging
import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sitecal.errors import DataError, InputError
from sitecal.protocol import DicomwebDestination, DimseDestination, LoadedProtocol
from sitecal.run._folder import attach_log, detach_log
from sitecal.run._resolved import run_protocol_of, send_destination
from sitecal.run.sealed import open_run

__all__ = ["parse_destination", "send_after_run", "send_run"]

logger = logging.getLogger(__name__)

_DIMSE = re.compile(r"dimse://([^@/]{1,16})@([^:/@]{1,253}):(\d{1,5})")


def parse_destination(text: str) -> DicomwebDestination | DimseDestination:
    """The archive of ``--to``: a DICOMweb base URL, or ``dimse://AE_TITLE@host:port``.

    Checked as ``report.send_to`` is (https, or http on loopback only; an AE title of at most 16
    characters; a port in 1-65535). No credentials: an archive that needs them is named in the protocol,
    with its ``credentials_file``.

    Raises
    ------
    InputError
        A text that is neither, or that the checks refuse (the reason named).
    """
    try:
        if text.startswith("dimse://"):
            match = _DIMSE.fullmatch(text)
            if match is None:
                raise InputError(f"--to {text!r}: expected dimse://AE_TITLE@host:port.")
            title, host, port = match.groups()
            return DimseDestination.model_validate(
                {"dimse": {"host": host, "port": int(port), "ae_title": title}}
            )
        return DicomwebDestination.model_validate({"dicomweb": text})
    except ValidationError as exc:
        reasons = "; ".join(error["msg"].removeprefix("Value error, ") for error in exc.errors())
        raise InputError(
            f"--to {text!r}: {reasons}. Give a DICOMweb URL (https://host/dicom-web) or "
            "dimse://AE_TITLE@host:port."
        ) from None


def send_run(
    folder: Path,
    protocol: Path | None = None,
    *,
    key_file: Path | None = None,
    to: str | None = None,
) -> dict[str, Any]:
    """Send a finished run folder's ``report.dcm`` to its archive (``sitecal send RUN_DIR``).

    The folder is verified against its seal first (:mod:`sitecal.run.sealed`; ``key_file``: the site key,
    when it is not where the run's protocol says), and its ``report.dcm`` must be the Encapsulated PDF
    of its ``report.pdf``: nothing else is sent. The destination is ``to`` (:func:`parse_destination`)
    when given, else ``report.send_to`` of ``protocol`` or of the run's own ``protocol.yaml`` (its files
    found from where the run recorded it read the protocol, :mod:`sitecal.run._resolved`); the attempt is
    logged in the folder's ``run.log`` and recorded in its ``sent.json``. Returns the record.

    Raises
    ------
    InputError
        A ``to`` that is not an archive's address.
    SealError
        An incomplete, unsealed or edited folder (the file named).
    DataError
        ``report.dcm`` not the run's report, no archive named, or the archive did not store it.
    """
    from sitecal.pacs.send import send_report

    folder = Path(folder)
    named = None if to is None else parse_destination(to)  # a typo is refused before the folder is read
    seal = open_run(folder, key_file=key_file, protocol=protocol)
    # a monitoring folder (sitecal monitor) sends its trend report, a run folder its validation report
    stem = "monitoring" if "monitoring.json" in seal.files else "report"
    _check_report_dcm(folder / f"{stem}.dcm", seal.read_bytes(f"{stem}.dcm"), seal.read_bytes(f"{stem}.pdf"))
    if named is None:
        destination, loaded = send_destination(folder, protocol, seal)
    else:
        destination, loaded = named, run_protocol_of(folder, protocol, seal=seal)
    handler = attach_log(folder / "run.log")
    try:
        return send_report(folder, destination, loaded.resolve, name=f"{stem}.dcm")
    finally:
        detach_log(handler)


def _check_report_dcm(path: Path, dcm: bytes, pdf: bytes) -> None:
    """Refuse a ``report.dcm`` (or ``monitoring.dcm``) that is not an Encapsulated PDF of its folder's PDF."""
    import pydicom

    from sitecal.pacs.send import ENCAPSULATED_PDF

    try:
        dataset = pydicom.dcmread(io.BytesIO(dcm))
        sop_class = str(dataset.get("SOPClassUID", ""))
        document = bytes(dataset.get("EncapsulatedDocument", b"") or b"")
    except Exception as exc:  # any parse failure of our own file is the same refusal
        raise DataError(f"{path}: not a readable DICOM file ({type(exc).__name__}).") from None
    # the PDF is padded to an even length with one NUL (PS3.3 C.24.2.1)
    if sop_class != ENCAPSULATED_PDF or document not in (pdf, pdf + b"\0"):
        raise DataError(
            f"{path}: not the Encapsulated PDF of this run's {path.stem}.pdf; only that is sent. "
            f"Render it again with 'sitecal report {path.parent}'."
        )


def send_after_run(
    loaded: LoadedProtocol, folder: Path, *, name: str = "report.dcm"
) -> dict[str, Any] | None:
    """Send ``name`` when ``report.send_to.after_run``; a failure is a warning (the verdict stands)."""
    destination = loaded.protocol.report.send_to
    if destination is None or not destination.after_run:
        return None
    from sitecal.pacs.send import send_report

    try:
        return send_report(folder, destination, loaded.resolve, name=name)
    except DataError:  # send_report logged why; the result stands
        logger.warning("%s was not sent; send it with `sitecal send %s`", name, folder)
        return None
