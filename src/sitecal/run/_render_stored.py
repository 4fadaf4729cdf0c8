"""A run folder's stored results rendered as report.pdf, report.html and report.dcm, recomputing no number.

:func:`render_stored` reads what a run stored (``evaluation.json``, ``calibration.json``,
``provenance.json``, :data:`REPORT_CONTEXT` and ``protocol.yaml``) and draws the report from it alone;
:func:`sitecal.run.stages.render_run` verifies the folder's seal around it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sitecal._io import read_json
from sitecal.errors import DataError
from sitecal.evaluation import verdict_problems
from sitecal.results import Evaluation, read_calibration, read_document

__all__ = ["REPORT_CONTEXT", "render_stored"]

#: The run folder file holding the protocol facts the report prints (besides protocol.yaml).
REPORT_CONTEXT = "report-context.json"


def render_stored(folder: Path) -> Path:
    """Render a folder's stored results, unsealed (``sitecal.evaluate_arrays(...).render``, no key).

    Writes ``report.pdf``, ``figures/``, ``report.html`` (the same report as one self-contained web page)
    and ``report.dcm``; the run's seal (``report.*``, ``figures/``) covers each of them.

    Reads ``evaluation.json``, ``calibration.json``, ``provenance.json``, ``report-context.json`` and
    ``protocol.yaml``; recomputes no number but the verdict, judged again from the stored criteria. The
    PDF's own time stamps are the run's time (``provenance.created_utc``), so rendering a run again gives
    the same PDF, byte for byte.
    """
    from sitecal.report import ReportInputs, render_report
    from sitecal.report.dicom_pdf import write_report_dicom

    folder = Path(folder)
    documents: dict[str, Mapping[str, Any]] = {}
    for name in ("evaluation.json", "calibration.json"):
        _stored(folder, name)  # a missing file is named as such, before its checks
    evaluation = read_document(folder / "evaluation.json", Evaluation)
    if problems := verdict_problems(evaluation):
        raise DataError(
            f"{folder / 'evaluation.json'}: its verdicts are not those its own numbers give "
            f"({'; '.join(problems[:3])}). Nothing was rendered: the document was edited, or made by a "
            "faulty sitecal. Run the protocol again."
        )
    documents["evaluation.json"] = evaluation.to_dict()
    documents["calibration.json"] = read_calibration(folder / "calibration.json").to_dict()
    documents |= {name: _stored(folder, name) for name in ("provenance.json", REPORT_CONTEXT)}
    context = dict(documents[REPORT_CONTEXT])
    page_size = str(context.pop("page_size", "A4"))
    protocol_yaml = folder / "protocol.yaml"
    try:
        context["yaml_text"] = protocol_yaml.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{protocol_yaml}: cannot read the protocol as run ({exc}).") from None
    provenance = documents["provenance.json"]
    with _pdf_time(str(provenance.get("created_utc", ""))):
        artifacts = render_report(
            ReportInputs(
                evaluation=documents["evaluation.json"],
                calibration=documents["calibration.json"],
                provenance=provenance,
                protocol=context,
            ),
            folder,
            page_size=page_size,
        )
    write_report_dicom(
        artifacts.pdf,
        folder / "report.dcm",
        document_id=str(provenance["document_id"]),
        title=str(context.get("title") or "Calibration validation report"),
        created_utc=str(provenance["created_utc"]),
    )
    return artifacts.pdf


@contextmanager
def _pdf_time(created_utc: str) -> Iterator[None]:
    """Date the PDF by the run's time: reportlab reads ``SOURCE_DATE_EPOCH`` for its time stamps."""
    import os

    try:
        epoch = int(datetime.strptime(created_utc, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp())
    except ValueError:
        raise DataError(
            f"provenance.json: created_utc {created_utc!r} is not a UTC time (YYYY-MM-DDThh:mm:ssZ)."
        ) from None
    before = os.environ.get("SOURCE_DATE_EPOCH")
    os.environ["SOURCE_DATE_EPOCH"] = str(epoch)
    try:
        yield
    finally:
        if before is None:
            del os.environ["SOURCE_DATE_EPOCH"]
        else:
            os.environ["SOURCE_DATE_EPOCH"] = before


def _stored(folder: Path, name: str) -> Mapping[str, Any]:
    path = folder / name
    if name == REPORT_CONTEXT and not path.is_file() and (folder / "evaluation.json").is_file():
        raise DataError(
            f"{path}: not found: this run was made by a sitecal older than 'sitecal report', which stores "
            "what the report prints of the protocol there. Run the protocol again to get a run that can be "
            "rendered again."
        )
    if not path.is_file():
        raise DataError(
            f"{path}: not found. {folder} is not a finished sitecal run folder (a run writes {name} before "
            "its report); give the folder of a run that completed."
        )
    document = read_json(path)
    if not isinstance(document, dict):
        raise DataError(f"{path}: expected a JSON object.")
    return document
