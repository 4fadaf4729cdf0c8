"""Fonts, colours, paragraph and table styles of the report: one sober house style."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib
from reportlab.lib import colors
from reportlab.lib.enums import TA_LEFT, TA_RIGHT
from reportlab.lib.styles import ParagraphStyle
from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.ttfonts import TTFont
from reportlab.platypus import Table, TableStyle

__all__ = ["Fonts", "Palette", "Styles", "make_styles", "register_fonts", "table"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Fonts:
    """Names of the registered fonts."""

    regular: str
    bold: str
    italic: str
    mono: str
    unicode: bool


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
    unjudged = colors.HexColor("#7a5c00")
    unjudged_bg = colors.HexColor("#f7f0dc")


_DEJAVU = {
    "regular": ("SitecalSans", "DejaVuSans.ttf"),
    "bold": ("SitecalSans-Bold", "DejaVuSans-Bold.ttf"),
    "italic": ("SitecalSans-Oblique", "DejaVuSans-Oblique.ttf"),
    "bold_italic": ("SitecalSans-BoldOblique", "DejaVuSans-BoldOblique.ttf"),
    "mono": ("SitecalMono", "DejaVuSansMono.ttf"),
}


def register_fonts() -> Fonts:
    """Register DejaVu Sans (shipped with matplotlib) with reportlab, once per process.

    reportlab's built-in Helvetica covers Latin-1 only, and a group name taken from a DICOM header may
    hold any character; DejaVu Sans covers Latin, Greek and Cyrillic scripts. Where the font files are
    missing the report falls back to Helvetica and logs a warning.
    """
    folder = Path(matplotlib.get_data_path()) / "fonts" / "ttf"
    registered = set(pdfmetrics.getRegisteredFontNames())
    try:
        for name, filename in _DEJAVU.values():
            if name not in registered:
                pdfmetrics.registerFont(TTFont(name, str(folder / filename)))
    except Exception as exc:  # a missing or unreadable font file must not stop the report
        log.warning(
            "DejaVu fonts not usable (%s); falling back to Helvetica, which lacks non-Latin-1 glyphs", exc
        )
        return Fonts("Helvetica", "Helvetica-Bold", "Helvetica-Oblique", "Courier", unicode=False)
    family = _DEJAVU["regular"][0]
    pdfmetrics.registerFontFamily(
        family,
        normal=family,
        bold=_DEJAVU["bold"][0],
        italic=_DEJAVU["italic"][0],
        boldItalic=_DEJAVU["bold_italic"][0],
    )
    return Fonts(family, _DEJAVU["bold"][0], _DEJAVU["italic"][0], _DEJAVU["mono"][0], unicode=True)


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
        h1=ParagraphStyle(
            "h1",
            parent=body,
            fontName=fonts.bold,
            fontSize=13.5,
            leading=17,
            spaceBefore=10,
            spaceAfter=7,
            textColor=Palette.accent,
            keepWithNext=1,
        ),
        h2=ParagraphStyle(
            "h2",
            parent=body,
            fontName=fonts.bold,
            fontSize=10.5,
            leading=13.5,
            spaceBefore=9,
            spaceAfter=4,
            keepWithNext=1,
        ),
        h3=ParagraphStyle(
            "h3",
            parent=body,
            fontName=fonts.bold,
            fontSize=9,
            leading=12,
            spaceBefore=7,
            spaceAfter=3,
            keepWithNext=1,
        ),
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
        caption=ParagraphStyle(
            "caption",
            parent=body,
            fontSize=7.8,
            leading=10,
            textColor=Palette.muted,
            spaceBefore=3,
            spaceAfter=10,
        ),
        table_title=ParagraphStyle(
            "table_title",
            parent=body,
            fontSize=7.8,
            leading=10,
            textColor=Palette.muted,
            spaceBefore=4,
            spaceAfter=3,
            keepWithNext=1,
        ),
        indent_cell=ParagraphStyle("indent_cell", parent=cell, leftIndent=12),
        cell_head_num=ParagraphStyle("cell_head_num", parent=cell, fontName=fonts.bold, alignment=TA_RIGHT),
        bullet=ParagraphStyle("bullet", parent=body, leftIndent=10, bulletIndent=0, spaceAfter=2),
    )


def table(
    rows: Sequence[Sequence[Any]],
    widths: Sequence[float],
    *,
    extra: Sequence[tuple[Any, ...]] = (),
    header: bool = True,
    row_heights: Sequence[float | None] | None = None,
) -> Table:
    """Build a table in the house style: header row shaded and repeated on every page, thin rules.

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
    """
    commands: list[tuple[Any, ...]] = [
        ("VALIGN", (0, 0), (-1, -1), "TOP"),
        ("LEFTPADDING", (0, 0), (-1, -1), 3.5),
        ("RIGHTPADDING", (0, 0), (-1, -1), 3.5),
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
    return Table(
        list(map(list, rows)),
        colWidths=list(widths),
        repeatRows=1 if header else 0,
        rowHeights=None if row_heights is None else list(row_heights),
        style=TableStyle(commands),
        hAlign="LEFT",
    )
