"""The PDF validation report: a reportlab platypus document drawn from the stored results.

Sections, in order: title page (verdict), Intended use, Data (sources, eligibility, flow, exclusions),
Cohort characteristics, Methods, Fitted temperatures (Fitted calibration under another method), Results
(overall, per subgroup attribute, forest plot, reliability diagrams), Fairness, Acceptance criteria,
Limitations, Sensitivity analyses (calibration slope, intercept and O:E, heterogeneity across sites, leave
one site out, recalibration methods compared), Provenance, Sign-off (the site's
statements, signatures), and an appendix with the protocol as run and the TRIPOD+AI / CLAIM 2024
crosswalk. Every page after the first carries a running header (title, document ID, protocol name); every
page a footer (protocol sha256, run folder, "Page n of m"). While the protocol lacks
any of the statements only the site can make (``report.governance``), every page's header says DRAFT.

A section builder is a function ``(Context) -> list[Flowable]`` that numbers its headings through
``ctx.h1`` / ``ctx.h2``; :data:`BUILDERS` lists them in document order. The crosswalk stays last, since it
refers to the section numbers the builders before it recorded.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any

from reportlab.lib.pagesizes import A4, LETTER
from reportlab.lib.units import mm
from reportlab.pdfbase.pdfmetrics import stringWidth
from reportlab.pdfgen.canvas import Canvas
from reportlab.platypus import BaseDocTemplate, Flowable, Frame, PageTemplate, Paragraph
from reportlab.platypus.doctemplate import LayoutError

from sitecal import __version__
from sitecal._io import write_bytes_atomic

from . import (
    _acceptance,
    _cohort,
    _crosswalk,
    _data,
    _fairness,
    _fitted,
    _limitations,
    _methods,
    _records,
    _results,
    _sections,
    _sensitivity,
)
from ._context import Context
from ._fonts import Fonts, font_runs, register_fonts, text_width
from ._governance import is_draft
from ._inputs import ReportArtifacts, ReportInputs, check_inputs
from ._styles import Palette, Styles, make_styles
from ._text import display_order, plain_text, short_sha
from .html import html_document

__all__ = ["BUILDERS", "PAGE_SIZES", "render_report"]

log = logging.getLogger(__name__)

PAGE_SIZES: dict[str, tuple[float, float]] = {"A4": A4, "Letter": LETTER}
_MARGIN_X = 18 * mm
_MARGIN_TOP = 20 * mm
_MARGIN_BOTTOM = 18 * mm
_DRAFT = "DRAFT"
# characters of a running header or footer line, and of the PDF's title and subject: more never fits
_LINE_CHARS = 400
_METADATA_CHARS = 200

Builder = Callable[[Context], list[Flowable]]
#: the section builders, in document order (the crosswalk last: it cites the numbers of the others)
BUILDERS: tuple[Builder, ...] = (
    _sections.title_page,
    _sections.intended_use,
    _data.data_section,
    _cohort.cohort_characteristics,
    _methods.methods,
    _fitted.fitted_calibration,
    _results.results,
    _fairness.fairness,
    _acceptance.acceptance,
    _limitations.limitations,
    _sensitivity.sensitivity,
    _records.provenance,
    _records.sign_off,
    _records.appendix_protocol,
    _crosswalk.appendix_crosswalk,
)


def _page_size(page_size: str, *, func: str = "render_report") -> tuple[float, float]:
    for name, size in PAGE_SIZES.items():
        if isinstance(page_size, str) and page_size.strip().lower() == name.lower():
            return size
    guess = difflib.get_close_matches(str(page_size), list(PAGE_SIZES), n=1, cutoff=0.4)
    hint = f" Did you mean {guess[0]!r}?" if guess else ""
    raise ValueError(
        f"The 'page_size' parameter of {func} must be one of {', '.join(map(repr, PAGE_SIZES))}. "
        f"Got {page_size!r}.{hint}"
    )


@dataclass(frozen=True)
class _Running:
    """Running header and footer text; drawn once the page count is known."""

    title: str
    right: str
    footer_left: str
    fonts: Fonts
    draft: bool = False

    def _fit(self, text: str, font: str, size: float, width: float) -> list[tuple[str | None, str]]:
        """Runs of ``text`` in display order, cut with an ellipsis to ``width`` points."""
        flat = plain_text(text, max_chars=len(text) + 1)  # control characters shown, one line
        line = flat[:_LINE_CHARS]
        runs = font_runs(display_order(line))
        if len(flat) <= _LINE_CHARS and text_width(runs, font, size) <= width:
            return runs
        low, high = 0, len(line)  # the longest prefix that fits with its ellipsis: binary search
        while low < high:
            mid = (low + high + 1) // 2
            if text_width(font_runs(display_order(line[:mid] + "…")), font, size) <= width:
                low = mid
            else:
                high = mid - 1
        return font_runs(display_order(line[:low] + "…"))

    @staticmethod
    def _draw(canvas: Canvas, x: float, y: float, runs: list[tuple[str | None, str]], font: str) -> None:
        size = canvas._fontsize
        for name, text in runs:
            canvas.setFont(name or font, size)
            canvas.drawString(x, y, text)
            x += stringWidth(text, name or font, size)

    def draw(self, canvas: Canvas, page: int, total: int) -> None:
        width, height = canvas._pagesize
        canvas.saveState()
        canvas.setFillColor(Palette.muted)
        canvas.setStrokeColor(Palette.faint_rule)
        canvas.setLineWidth(0.5)
        size = 7.5
        y = height - _MARGIN_TOP + 7 * mm
        left = _MARGIN_X
        if self.draft:  # on every page, the title page included
            mark = _DRAFT + "  "
            canvas.setFillColor(Palette.failed)
            canvas.setFont(self.fonts.bold, size)
            canvas.drawString(left, y, mark)
            left += stringWidth(mark, self.fonts.bold, size)
            canvas.setFillColor(Palette.muted)
        if page > 1:
            right = self._fit(self.right, self.fonts.regular, size, (width - 2 * _MARGIN_X) / 2)
            right_w = text_width(right, self.fonts.regular, size)
            canvas.setFont(self.fonts.regular, size)
            self._draw(canvas, width - _MARGIN_X - right_w, y, right, self.fonts.regular)
            room = width - _MARGIN_X - left - right_w - 8 * mm
            canvas.setFont(self.fonts.bold, size)
            self._draw(canvas, left, y, self._fit(self.title, self.fonts.bold, size, room), self.fonts.bold)
            canvas.line(_MARGIN_X, y - 2.2 * mm, width - _MARGIN_X, y - 2.2 * mm)
        y = _MARGIN_BOTTOM - 9 * mm
        canvas.line(_MARGIN_X, y + 3.6 * mm, width - _MARGIN_X, y + 3.6 * mm)
        canvas.setFont(self.fonts.regular, size)
        number = f"Page {page} of {total}"
        canvas.drawRightString(width - _MARGIN_X, y, number)
        room = width - 2 * _MARGIN_X - stringWidth(number, self.fonts.regular, size) - 8 * mm
        footer = self._fit(self.footer_left, self.fonts.regular, size, room)
        self._draw(canvas, _MARGIN_X, y, footer, self.fonts.regular)
        canvas.restoreState()


def _numbered_canvas(running: _Running) -> Callable[..., Canvas]:
    """Make a canvas class that draws page furniture at ``save``, when "Page n of m" is known."""

    class NumberedCanvas(Canvas):  # type: ignore[misc]  # reportlab ships no type hints
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._pages: list[dict[str, Any]] = []

        def showPage(self) -> None:
            self._pages.append(dict(self.__dict__))
            self._startPage()

        def save(self) -> None:
            total = len(self._pages)
            for state in self._pages:
                self.__dict__.update(state)
                running.draw(self, self._pageNumber, total)
                super().showPage()
            super().save()

    return NumberedCanvas


LEFT_OUT = (
    "Left out here: a {kind} that cannot be laid out on a page (text from the inputs too long for it). "
    "Its values are in the run folder's evaluation.json, calibration.json and provenance.json."
)


class _Document(BaseDocTemplate):  # type: ignore[misc]
    """Doc template for the report.

    Headings carrying ``outline = (level, text)`` become PDF bookmarks. A flowable that cannot be laid
    out even on an empty page (reportlab's ``LayoutError``) is replaced by a note saying so, and the
    document goes on: input text that defeats the cuts of :func:`._styles.table` costs one table, not
    the report.
    """

    styles: Styles
    left_out: int = 0
    #: the note that takes the place of a flowable that cannot be laid out
    left_out_note: str = LEFT_OUT

    def afterFlowable(self, flowable: Flowable) -> None:
        outline = getattr(flowable, "outline", None)
        if outline is None:
            return
        level, text = outline
        key = f"h{id(flowable)}"
        self.canv.bookmarkPage(key)
        self.canv.addOutlineEntry(text[:_METADATA_CHARS], key, level=level, closed=level > 0)

    def handle_flowable(self, flowables: list[Flowable]) -> None:
        first = flowables[0] if flowables else None
        try:
            super().handle_flowable(flowables)
        except LayoutError:
            # reportlab has taken the flowable off the list before raising; the note takes its place
            kind = "table" if "Table" in type(first).__name__ else "part of the section"
            self.left_out += 1
            log.warning("report: a %s could not be laid out on a page and is replaced by a note", kind)
            flowables.insert(0, Paragraph(self.left_out_note.format(kind=kind), self.styles.note))


@dataclass(frozen=True)
class _Identity:
    """What names the document in its running header and footer and in the PDF's metadata."""

    title: str
    name: str  # the protocol's name, on one line
    sha: str  # the protocol's sha256, shortened
    document: object  # the document ID, or None
    draft: bool

    @classmethod
    def of(cls, inputs: ReportInputs) -> _Identity:
        """Read the identity from the protocol facts, the evaluation and the provenance."""
        protocol = inputs.protocol
        name = plain_text(protocol["name"], max_chars=_METADATA_CHARS)
        return cls(
            title=str(protocol.get("title") or f"Calibration validation: protocol {name}"),
            name=name,
            sha=short_sha(protocol.get("sha256") or inputs.evaluation.get("protocol", {}).get("sha256")),
            document=inputs.provenance.get("document_id"),
            draft=is_draft(protocol),
        )


def _running(identity: _Identity, provenance: Mapping[str, Any], fonts: Fonts) -> _Running:
    """The running header (title, document ID, protocol) and footer (sha256, run folder, version)."""
    run_folder = provenance.get("run_folder")
    document = identity.document
    return _Running(
        title=identity.title,
        right=(f"Document {document} · " if document else "") + f"protocol {identity.name}",
        footer_left=f"Protocol sha256 {identity.sha}"
        + (f" · run {run_folder}" if run_folder else "")
        + f" · sitecal {provenance.get('sitecal_version') or __version__}",
        fonts=fonts,
        draft=identity.draft,
    )


def _add_body_frame(doc: BaseDocTemplate) -> None:
    """Give ``doc`` its one page template: a body frame filling the margins, without padding."""
    frame = Frame(
        doc.leftMargin,
        doc.bottomMargin,
        doc.width,
        doc.height,
        id="body",
        leftPadding=0,
        rightPadding=0,
        topPadding=0,
        bottomPadding=0,
    )
    doc.addPageTemplates([PageTemplate(id="page", frames=[frame])])


def _document(buffer: BytesIO, size: tuple[float, float], identity: _Identity, styles: Styles) -> _Document:
    """The doc template writing into ``buffer``: margins, one body frame, the PDF's metadata."""
    document = identity.document
    doc = _Document(
        buffer,
        pagesize=size,
        leftMargin=_MARGIN_X,
        rightMargin=_MARGIN_X,
        topMargin=_MARGIN_TOP,
        bottomMargin=_MARGIN_BOTTOM,
        title=identity.title[:_METADATA_CHARS],
        author="sitecal",
        subject=(f"{_DRAFT}: " if identity.draft else "")
        + f"Calibration validation report, protocol {identity.name} (sha256 {identity.sha})"
        + (f", document {document}" if document else ""),
        creator=f"sitecal {__version__} (reportlab)",
        keywords=["calibration", "validation", "sitecal", identity.name],
        lang="en",
    )
    _add_body_frame(doc)
    doc.styles = styles
    return doc


def render_report(inputs: ReportInputs, out_dir: Path, *, page_size: str = "A4") -> ReportArtifacts:
    """Render the PDF validation report and its figures from stored results.

    Parameters
    ----------
    inputs : ReportInputs
        ``evaluation.json``, ``calibration.json``, ``provenance.json`` content and the protocol facts.
        Nothing is recomputed: every number printed is read from these mappings.
    out_dir : Path
        Folder to write into (created if needed): ``report.pdf``, ``figures/*.png`` and
        ``report.html``, the same report as one self-contained web page (:mod:`sitecal.report.html`).
    page_size : {"A4", "Letter"}, default "A4"
        Paper size (case-insensitive).

    Returns
    -------
    ReportArtifacts
        Paths of the PDF, of the figures in document order, and of the HTML view.

    Raises
    ------
    DataError
        If a required field is missing or malformed; the message names the file and the field.
    ValueError
        If ``page_size`` is not one of the supported sizes.
    OutputError
        If ``out_dir`` cannot be written.

    Notes
    -----
    Files are written atomically (temporary file in the same folder, then ``os.replace``), so a reader
    never sees a half-written PDF. Text from the protocol and from DICOM headers is printed literally.

    Examples
    --------
    >>> import json
    >>> from pathlib import Path
    >>> from sitecal.report import ReportInputs, render_report
    >>> run = Path("reports/demo-20261202T180000Z")                          # doctest: +SKIP
    >>> load = lambda name: json.loads((run / name).read_text("utf-8"))      # doctest: +SKIP
    >>> inputs = ReportInputs(load("evaluation.json"), load("calibration.json"),
    ...                       load("provenance.json"), protocol)             # doctest: +SKIP
    >>> render_report(inputs, run).pdf                                       # doctest: +SKIP
    PosixPath('reports/demo-20261202T180000Z/report.pdf')
    """
    size = _page_size(page_size)
    check_inputs(inputs)
    out_dir = Path(out_dir)
    fonts = register_fonts()
    styles = make_styles(fonts)
    identity = _Identity.of(inputs)
    running = _running(identity, inputs.provenance, fonts)
    buffer = BytesIO()
    doc = _document(buffer, size, identity, styles)
    ctx = Context(inputs=inputs, styles=styles, width=doc.width, figures_dir=out_dir / "figures")
    story: list[Flowable] = []
    for build in BUILDERS:
        story += build(ctx)
    # translated before layout, which consumes the story and splits its flowables
    page, _ = html_document(
        story, title=identity.title, verdict=inputs.evaluation.get("verdict"), draft=identity.draft
    )
    doc.build(story, canvasmaker=_numbered_canvas(running))
    pdf = out_dir / "report.pdf"
    write_bytes_atomic(pdf, buffer.getvalue())
    html = out_dir / "report.html"
    write_bytes_atomic(html, page.encode("utf-8"))
    log.info("wrote %s and %s (%d figures)", pdf, html.name, len(ctx.figures))
    return ReportArtifacts(pdf=pdf, figures=tuple(ctx.figures), html=html)
