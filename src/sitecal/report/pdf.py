"""The PDF validation report: a reportlab platypus document drawn from the stored results.

Sections, in order: title page (verdict), Intended use, Data (sources, eligibility, flow, exclusions),
Cohort characteristics, Methods, Fitted temperatures, Results (overall, per subgroup attribute, forest plot,
reliability diagrams), Fairness, Acceptance criteria, Limitations, Sensitivity analyses (calibration slope,
intercept and O:E, heterogeneity across sites, leave one site out), Provenance, Sign-off (the site's
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
from collections.abc import Callable
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any

from reportlab.lib.pagesizes import A4, LETTER
from reportlab.lib.units import mm
from reportlab.pdfbase.pdfmetrics import stringWidth
from reportlab.pdfgen.canvas import Canvas
from reportlab.platypus import BaseDocTemplate, Flowable, Frame, PageTemplate

from sitecal import __version__
from sitecal._io import write_bytes_atomic

from . import (
    _cohort,
    _crosswalk,
    _data,
    _fairness,
    _limitations,
    _methods,
    _records,
    _results,
    _sections,
    _sensitivity,
)
from ._context import Context
from ._governance import is_draft
from ._inputs import ReportArtifacts, ReportInputs, check_inputs
from ._styles import Fonts, Palette, make_styles, register_fonts
from ._text import short_sha

__all__ = ["BUILDERS", "PAGE_SIZES", "render_report"]

log = logging.getLogger(__name__)

PAGE_SIZES: dict[str, tuple[float, float]] = {"A4": A4, "Letter": LETTER}
_MARGIN_X = 18 * mm
_MARGIN_TOP = 20 * mm
_MARGIN_BOTTOM = 18 * mm
_DRAFT = "DRAFT"

Builder = Callable[[Context], list[Flowable]]
#: the section builders, in document order (the crosswalk last: it cites the numbers of the others)
BUILDERS: tuple[Builder, ...] = (
    _sections.title_page,
    _sections.intended_use,
    _data.data_section,
    _cohort.cohort_characteristics,
    _methods.methods,
    _methods.fitted_temperatures,
    _results.results,
    _fairness.fairness,
    _results.acceptance,
    _limitations.limitations,
    _sensitivity.sensitivity,
    _records.provenance,
    _records.sign_off,
    _records.appendix_protocol,
    _crosswalk.appendix_crosswalk,
)


def _page_size(page_size: str) -> tuple[float, float]:
    for name, size in PAGE_SIZES.items():
        if isinstance(page_size, str) and page_size.strip().lower() == name.lower():
            return size
    guess = difflib.get_close_matches(str(page_size), list(PAGE_SIZES), n=1, cutoff=0.4)
    hint = f" Did you mean {guess[0]!r}?" if guess else ""
    raise ValueError(
        f"The 'page_size' parameter of render_report must be one of {', '.join(map(repr, PAGE_SIZES))}. "
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

    def _fit(self, text: str, font: str, size: float, width: float) -> str:
        if stringWidth(text, font, size) <= width:
            return text
        while text and stringWidth(text + "…", font, size) > width:
            text = text[:-1]
        return text + "…"

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
            right_w = stringWidth(self.right, self.fonts.regular, size)
            canvas.setFont(self.fonts.regular, size)
            canvas.drawRightString(width - _MARGIN_X, y, self.right)
            room = width - _MARGIN_X - left - right_w - 8 * mm
            canvas.setFont(self.fonts.bold, size)
            canvas.drawString(left, y, self._fit(self.title, self.fonts.bold, size, room))
            canvas.line(_MARGIN_X, y - 2.2 * mm, width - _MARGIN_X, y - 2.2 * mm)
        y = _MARGIN_BOTTOM - 9 * mm
        canvas.line(_MARGIN_X, y + 3.6 * mm, width - _MARGIN_X, y + 3.6 * mm)
        canvas.setFont(self.fonts.regular, size)
        number = f"Page {page} of {total}"
        canvas.drawRightString(width - _MARGIN_X, y, number)
        room = width - 2 * _MARGIN_X - stringWidth(number, self.fonts.regular, size) - 8 * mm
        canvas.drawString(_MARGIN_X, y, self._fit(self.footer_left, self.fonts.regular, size, room))
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


class _Document(BaseDocTemplate):  # type: ignore[misc]
    """Doc template that turns headings carrying ``outline = (level, text)`` into PDF bookmarks."""

    def afterFlowable(self, flowable: Flowable) -> None:
        outline = getattr(flowable, "outline", None)
        if outline is None:
            return
        level, text = outline
        key = f"h{id(flowable)}"
        self.canv.bookmarkPage(key)
        self.canv.addOutlineEntry(text, key, level=level, closed=level > 0)


def render_report(inputs: ReportInputs, out_dir: Path, *, page_size: str = "A4") -> ReportArtifacts:
    """Render the PDF validation report and its figures from stored results.

    Parameters
    ----------
    inputs : ReportInputs
        ``evaluation.json``, ``calibration.json``, ``provenance.json`` content and the protocol facts.
        Nothing is recomputed: every number printed is read from these mappings.
    out_dir : Path
        Folder to write into (created if needed): ``report.pdf`` and ``figures/*.png``.
    page_size : {"A4", "Letter"}, default "A4"
        Paper size (case-insensitive).

    Returns
    -------
    ReportArtifacts
        Paths of the PDF and of the figures, in document order.

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
    protocol = inputs.protocol
    title = str(protocol.get("title") or f"Calibration validation: protocol {protocol['name']}")
    sha = short_sha(protocol.get("sha256") or inputs.evaluation.get("protocol", {}).get("sha256"))
    run_folder = inputs.provenance.get("run_folder")
    document = inputs.provenance.get("document_id")
    draft = is_draft(protocol)
    running = _Running(
        title=title,
        right=(f"Document {document} · " if document else "") + f"protocol {protocol['name']}",
        footer_left=f"Protocol sha256 {sha}"
        + (f" · run {run_folder}" if run_folder else "")
        + f" · sitecal {inputs.provenance.get('sitecal_version') or __version__}",
        fonts=fonts,
        draft=draft,
    )
    buffer = BytesIO()
    doc = _Document(
        buffer,
        pagesize=size,
        leftMargin=_MARGIN_X,
        rightMargin=_MARGIN_X,
        topMargin=_MARGIN_TOP,
        bottomMargin=_MARGIN_BOTTOM,
        title=title,
        author="sitecal",
        subject=(f"{_DRAFT}: " if draft else "")
        + f"Calibration validation report, protocol {protocol['name']} (sha256 {sha})"
        + (f", document {document}" if document else ""),
        creator=f"sitecal {__version__} (reportlab)",
        keywords=["calibration", "validation", "sitecal", str(protocol["name"])],
        lang="en",
    )
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
    ctx = Context(inputs=inputs, styles=styles, width=doc.width, figures_dir=out_dir / "figures")
    story: list[Flowable] = []
    for build in BUILDERS:
        story += build(ctx)
    doc.build(story, canvasmaker=_numbered_canvas(running))
    pdf = out_dir / "report.pdf"
    write_bytes_atomic(pdf, buffer.getvalue())
    log.info("wrote %s (%d figures)", pdf, len(ctx.figures))
    return ReportArtifacts(pdf=pdf, figures=tuple(ctx.figures))
