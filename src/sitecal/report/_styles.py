"""Fonts, colours, paragraph and table styles of the report: one sober house style."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from reportlab.lib import colors
from reportlab.lib.enums import TA_LEFT, TA_RIGHT
from reportlab.lib.styles import ParagraphStyle
from reportlab.platypus import Paragraph, Table, TableStyle

from ._fonts import Fonts, register_fonts

__all__ = ["CELL_MAX_HEIGHT", "Fonts", "Palette", "Styles", "make_styles", "register_fonts", "table"]

log = logging.getLogger(__name__)

#: points; a table row cannot be split across pages, so a cell taller than this is cut (see :func:`table`)
CELL_MAX_HEIGHT = 220.0
_PAD_X = 3.5
# a cell with fewer characters of markup than this is never taller than CELL_MAX_HEIGHT in any column
# the report draws (3 characters a line at the narrowest), so it is not measured
_MEASURE_FROM = 60
CUT_NOTE = "… (cut here: too long for a table cell)"


class Palette:
    """Colours: dark ink, one blue accent, muted verdict colours."""

    ink = colors.HexColor("#1e1e1e")
    muted = colors.HexColor("#595959")
    accent = colors.HexColor("#1f4e79")
    rule = colors.HexColor("#9aa3ad")
    faint_rule = colors.HexColor("#d5dae0")
    header_bg = colors.HexColor("#e9edf2")
    small_bg = colors.HexColor("#fbf4e2")
    passed = colors.HexColor("#1e6b34")
    passed_bg = colors.HexColor("#e6f2e8")
    failed = colors.HexColor("#a61c1c")
    failed_bg = colors.HexColor("#f8e6e6")
    inconclusive = colors.HexColor("#9a4a00")
    inconclusive_bg = colors.HexColor("#fbe9d9")
    unjudged = colors.HexColor("#7a5c00")
    unjudged_bg = colors.HexColor("#f7f0dc")


@dataclass(frozen=True)
class Styles:
    """Paragraph styles used by every section."""

    fonts: Fonts
    body: ParagraphStyle
    small: ParagraphStyle
    note: ParagraphStyle
    cell: ParagraphStyle
    cell_num: ParagraphStyle
    cell_head: ParagraphStyle
    mono: ParagraphStyle
    h1: ParagraphStyle
    h2: ParagraphStyle
    h3: ParagraphStyle
    kicker: ParagraphStyle
    title: ParagraphStyle
    caption: ParagraphStyle
    table_title: ParagraphStyle
    indent_cell: ParagraphStyle
    cell_head_num: ParagraphStyle
    bullet: ParagraphStyle


def _heading_styles(
    body: ParagraphStyle, fonts: Fonts
) -> tuple[ParagraphStyle, ParagraphStyle, ParagraphStyle]:
    """The section, subsection and sub-subsection headings (h1, h2, h3), each kept with what follows."""
    h1 = ParagraphStyle(
        "h1",
        parent=body,
        fontName=fonts.bold,
        fontSize=13.5,
        leading=17,
        spaceBefore=10,
        spaceAfter=7,
        textColor=Palette.accent,
        keepWithNext=1,
    )
    h2 = ParagraphStyle(
        "h2",
        parent=body,
        fontName=fonts.bold,
        fontSize=10.5,
        leading=13.5,
        spaceBefore=9,
        spaceAfter=4,
        keepWithNext=1,
    )
    h3 = ParagraphStyle(
        "h3",
        parent=body,
        fontName=fonts.bold,
        fontSize=9,
        leading=12,
        spaceBefore=7,
        spaceAfter=3,
        keepWithNext=1,
    )
    return h1, h2, h3


def _caption_styles(body: ParagraphStyle) -> tuple[ParagraphStyle, ParagraphStyle]:
    """A figure's caption (below it) and a table's numbered title (above it, kept with it)."""
    caption = ParagraphStyle(
        "caption",
        parent=body,
        fontSize=7.8,
        leading=10,
        textColor=Palette.muted,
        spaceBefore=3,
        spaceAfter=10,
    )
    table_title = ParagraphStyle(
        "table_title",
        parent=body,
        fontSize=7.8,
        leading=10,
        textColor=Palette.muted,
        spaceBefore=4,
        spaceAfter=3,
        keepWithNext=1,
    )
    return caption, table_title


def make_styles(fonts: Fonts) -> Styles:
    """Build the paragraph styles on ``fonts``."""
    ink = Palette.ink
    body = ParagraphStyle(
        "body",
        fontName=fonts.regular,
        fontSize=9,
        leading=12.5,
        textColor=ink,
        spaceAfter=5,
        alignment=TA_LEFT,
    )
    cell = ParagraphStyle("cell", parent=body, fontSize=7.8, leading=9.8, spaceAfter=0)
    h1, h2, h3 = _heading_styles(body, fonts)
    caption, table_title = _caption_styles(body)
    return Styles(
        fonts=fonts,
        body=body,
        small=ParagraphStyle("small", parent=body, fontSize=8, leading=10.5),
        note=ParagraphStyle(
            "note", parent=body, fontSize=7.8, leading=10, textColor=Palette.muted, spaceBefore=2
        ),
        cell=cell,
        cell_num=ParagraphStyle("cell_num", parent=cell, alignment=TA_RIGHT),
        cell_head=ParagraphStyle("cell_head", parent=cell, fontName=fonts.bold),
        mono=ParagraphStyle("mono", parent=cell, fontName=fonts.mono, fontSize=7.2, leading=9.2),
        h1=h1,
        h2=h2,
        h3=h3,
        kicker=ParagraphStyle(
            "kicker",
            parent=body,
            fontName=fonts.bold,
            fontSize=11,
            leading=14,
            textColor=Palette.muted,
            spaceAfter=4,
        ),
        title=ParagraphStyle(
            "title", parent=body, fontName=fonts.bold, fontSize=19, leading=24, textColor=ink, spaceAfter=10
        ),
        caption=caption,
        table_title=table_title,
        indent_cell=ParagraphStyle("indent_cell", parent=cell, leftIndent=12),
        cell_head_num=ParagraphStyle("cell_head_num", parent=cell, fontName=fonts.bold, alignment=TA_RIGHT),
        bullet=ParagraphStyle("bullet", parent=body, leftIndent=10, bulletIndent=0, spaceAfter=2),
    )


def _cut_note(style: ParagraphStyle) -> Paragraph:
    note = style.clone(f"{style.name}_cut", textColor=Palette.muted)
    return Paragraph(CUT_NOTE, note)


def _as_list(cell: Any) -> list[Any]:
    return cell if isinstance(cell, list) else [cell]


def fit_cell(cell: Any, width: float, *, max_height: float = CELL_MAX_HEIGHT) -> Any:
    """Return ``cell`` cut to at most ``max_height`` points when set ``width`` points wide.

    A table row is laid out whole on one page: a cell taller than the page (a 10,000-character header
    value, say) would stop the document with reportlab's ``LayoutError``. A long paragraph keeps the
    lines that fit, followed by :data:`CUT_NOTE`; anything else is returned as it is.

    Parameters
    ----------
    cell : object
        A table cell: a Paragraph, a string, or another flowable.
    width : float
        Column width in points, padding included.
    max_height : float, default CELL_MAX_HEIGHT
        The tallest the cell may be, note included.

    Returns
    -------
    object
        ``cell``, or a list ``[first lines, note]`` that reportlab stacks in the cell. A list of
        flowables is fitted item by item, each to an equal share of ``max_height``.
    """
    if isinstance(cell, list | tuple) and cell:  # a stack of flowables: each gets its share
        share = max_height / len(cell)
        return [part for item in cell for part in _as_list(fit_cell(item, width, max_height=share))]
    if not isinstance(cell, Paragraph) or len(getattr(cell, "text", "")) < _MEASURE_FROM:
        return cell
    inner = max(width - 2 * _PAD_X, 1.0)
    # measured on a copy: wrapping turns a paragraph's fragments into line structures, and the table
    # must receive the cell as the section built it
    probe = Paragraph(cell.text, cell.style, bulletText=cell.bulletText)
    _, height = probe.wrap(inner, 1e9)
    if height <= max_height:
        return cell
    note = _cut_note(cell.style)
    _, note_height = note.wrap(inner, 1e9)
    parts = probe.split(inner, max(max_height - note_height, cell.style.leading))
    return [parts[0], note] if parts else [note]


def _span_widths(
    commands: Sequence[tuple[Any, ...]], widths: Sequence[float], n_rows: int
) -> dict[tuple[int, int], float]:
    """Width of each cell that starts a ``SPAN``, keyed by (column, row)."""
    out: dict[tuple[int, int], float] = {}
    n_cols = len(widths)
    for command in commands:
        if command[0] != "SPAN":
            continue
        (c0, r0), (c1, _) = command[1], command[2]
        c0, c1 = c0 % n_cols, c1 % n_cols
        r0 = r0 % max(n_rows, 1)
        out[(min(c0, c1), r0)] = sum(widths[min(c0, c1) : max(c0, c1) + 1])
    return out


def table(
    rows: Sequence[Sequence[Any]],
    widths: Sequence[float],
    *,
    extra: Sequence[tuple[Any, ...]] = (),
    header: bool = True,
    row_heights: Sequence[float | None] | None = None,
    split_cells: bool = False,
) -> Table:
    """Build a table in the house style: header row shaded and repeated on every page, thin rules.

    Every cell is passed through :func:`fit_cell`, so no cell can be taller than a page, unless
    ``split_cells`` lets rows continue on the next page instead.

    Parameters
    ----------
    rows : sequence of rows
        Cells are flowables (usually Paragraphs) or plain strings.
    widths : sequence of float
        Column widths in points; they should add up to the frame width or less.
    extra : sequence of tuple
        Further ``TableStyle`` commands (spans, shading).
    header : bool, default True
        Whether the first row is a header.
    row_heights : sequence of float or None, optional
        Fixed row heights (None: fit the content).
    split_cells : bool, default False
        Let a tall row break across pages and keep its cells whole (for statements that must be printed
        in full, such as the site's governance statements) instead of cutting long cells.
    """
    commands: list[tuple[Any, ...]] = [
        ("VALIGN", (0, 0), (-1, -1), "TOP"),
        ("LEFTPADDING", (0, 0), (-1, -1), _PAD_X),
        ("RIGHTPADDING", (0, 0), (-1, -1), _PAD_X),
        ("TOPPADDING", (0, 0), (-1, -1), 2.5),
        ("BOTTOMPADDING", (0, 0), (-1, -1), 3),
        ("LINEABOVE", (0, 0), (-1, 0), 0.8, Palette.rule),
        ("LINEBELOW", (0, -1), (-1, -1), 0.8, Palette.rule),
        ("LINEBELOW", (0, 0), (-1, -2), 0.3, Palette.faint_rule),
    ]
    if header:
        commands += [
            ("BACKGROUND", (0, 0), (-1, 0), Palette.header_bg),
            ("LINEBELOW", (0, 0), (-1, 0), 0.6, Palette.rule),
        ]
    commands += list(extra)
    data = [list(row) for row in rows]
    if not split_cells:
        spans = _span_widths(extra, widths, len(data))
        for r, row in enumerate(data):
            for c, cell in enumerate(row[: len(widths)]):
                row[c] = fit_cell(cell, spans.get((c, r), widths[c]))
    return Table(
        data,
        colWidths=list(widths),
        repeatRows=1 if header else 0,
        rowHeights=None if row_heights is None else list(row_heights),
        style=TableStyle(commands),
        hAlign="LEFT",
        splitInRow=1 if split_cells else 0,
    )
