"""The monitoring trend report: ``monitoring.pdf``, ``monitoring.html`` and their figures.

Drawn from one :class:`~sitecal.results.MonitoringDocument` (``monitoring.json``) and nothing else: the
alerts first (alarms, then the label-free warnings in words), then one trend figure per group and metric
with the group's evidence, the methods, and every window. The story is built once
(:mod:`._monitoring_story`); the PDF is laid out from it with the validation report's running header and
footer, page template and styles (:mod:`.pdf`), and the HTML view is translated from the same flowables
(:mod:`.html`), as :func:`~sitecal.report.render_report` does.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path

from reportlab.platypus import Flowable

from sitecal import __version__
from sitecal._io import write_bytes_atomic
from sitecal.results import MonitoringDocument

from ._fonts import register_fonts
from ._monitoring_story import MonitoringStory, build_story
from ._styles import make_styles
from ._text import plain_text, short_sha
from .html import html_document
from .pdf import (
    _MARGIN_BOTTOM,
    _MARGIN_TOP,
    _MARGIN_X,
    _METADATA_CHARS,
    _add_body_frame,
    _Document,
    _numbered_canvas,
    _page_size,
    _Running,
)

__all__ = ["MonitoringArtifacts", "render_monitoring"]

log = logging.getLogger(__name__)

_LEFT_OUT = (
    "Left out here: a {kind} that cannot be laid out on a page (text from the inputs too long for it). "
    "Its values are in this folder's monitoring.json."
)


@dataclass(frozen=True)
class MonitoringArtifacts:
    """Files :func:`render_monitoring` wrote.

    Attributes
    ----------
    pdf : Path
        ``folder/monitoring.pdf``.
    html : Path
        ``folder/monitoring.html``: the same report as one self-contained web page.
    figures : tuple of Path
        ``folder/figures/monitor_*.png`` in document order (each with an ``.svg`` beside it).
    """

    pdf: Path
    html: Path
    figures: tuple[Path, ...]


def render_monitoring(
    document: MonitoringDocument, folder: Path, *, page_size: str = "A4"
) -> MonitoringArtifacts:
    """Render the monitoring trend report of ``document`` into ``folder``.

    Parameters
    ----------
    document : MonitoringDocument
        ``monitoring.json`` as written by ``sitecal monitor``. Nothing is recomputed: every number printed
        or drawn is read from it.
    folder : Path
        The monitoring folder (created if needed): ``monitoring.pdf``, ``monitoring.html`` and
        ``figures/monitor_*.png`` (and ``.svg``) are written there, each atomically.
    page_size : {"A4", "Letter"}, default "A4"
        Paper size (case-insensitive).

    Returns
    -------
    MonitoringArtifacts
        Paths of the PDF, the HTML view and the figures.

    Raises
    ------
    ValueError
        If ``page_size`` is not one of the supported sizes.
    OutputError
        If ``folder`` cannot be written.

    Notes
    -----
    At most :data:`~sitecal.report._monitoring_story.MAX_GROUPS` groups are drawn, each with at most four
    metric figures and one evidence figure; the report names the groups it leaves out. Text from the
    protocol and the data (group names, criterion ids) is printed literally, never as markup.

    Examples
    --------
    >>> from sitecal.results import MonitoringDocument, read_document
    >>> from sitecal.report import render_monitoring
    >>> folder = Path("monitoring/chest-20270401T060000Z")                          # doctest: +SKIP
    >>> document = read_document(folder / "monitoring.json", MonitoringDocument)    # doctest: +SKIP
    >>> render_monitoring(document, folder).pdf                                     # doctest: +SKIP
    PosixPath('monitoring/chest-20270401T060000Z/monitoring.pdf')
    """
    size = _page_size(page_size, func="render_monitoring")
    folder = Path(folder)
    fonts = register_fonts()
    styles = make_styles(fonts)
    name = plain_text(document.protocol.name, max_chars=_METADATA_CHARS)
    sha = short_sha(document.protocol.sha256)
    title = f"Calibration monitoring: protocol {name}"
    baseline = document.baseline
    running = _Running(
        title=title,
        right=(f"Baseline document {baseline.document_id} · " if baseline.document_id else "")
        + f"protocol {name}",
        footer_left=f"Protocol sha256 {sha} · monitoring {folder.name} · baseline {baseline.run_folder}"
        f" · sitecal {__version__}",
        fonts=fonts,
    )
    buffer = BytesIO()
    doc = _Document(
        buffer,
        pagesize=size,
        leftMargin=_MARGIN_X,
        rightMargin=_MARGIN_X,
        topMargin=_MARGIN_TOP,
        bottomMargin=_MARGIN_BOTTOM,
        title=title[:_METADATA_CHARS],
        author="sitecal",
        subject=f"Calibration monitoring report, protocol {name} (sha256 {sha}), verdict {document.verdict}",
        creator=f"sitecal {__version__} (reportlab)",
        keywords=["calibration", "monitoring", "sitecal", name],
        lang="en",
    )
    _add_body_frame(doc)
    doc.styles = styles
    doc.left_out_note = _LEFT_OUT
    story_state = MonitoringStory(styles=styles, width=doc.width, figures_dir=folder / "figures")
    story: list[Flowable] = build_story(story_state, document)
    # translated before layout, which consumes the story and splits its flowables
    page, _ = html_document(story, title=title, verdict=document.verdict, draft=False)
    doc.build(story, canvasmaker=_numbered_canvas(running))
    pdf = folder / "monitoring.pdf"
    write_bytes_atomic(pdf, buffer.getvalue())
    html = folder / "monitoring.html"
    write_bytes_atomic(html, page.encode("utf-8"))
    log.info("wrote %s and %s (%d figures)", pdf, html.name, len(story_state.figures))
    return MonitoringArtifacts(pdf=pdf, html=html, figures=tuple(story_state.figures))
