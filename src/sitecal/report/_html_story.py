"""The PDF's story translated into HTML: the flowables the section builders make, one by one.

The HTML view is drawn from the very flowables the PDF is laid out from, so its sections, tables and
figures cannot drift from the PDF's. Text is taken from each paragraph's parsed fragments (reportlab has
already read its mini markup), never from the markup itself: every character of text is escaped, and only
the tags written here (``b``, ``i``, ``sup``, ``sub``, ``br``, a coloured ``span``) can reach the page.
A flowable of a kind this module does not know raises :class:`TypeError` instead of vanishing.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from reportlab.lib.colors import Color
from reportlab.lib.fonts import ps2tt
from reportlab.platypus import (
    CondPageBreak,
    Flowable,
    Image,
    KeepTogether,
    PageBreak,
    Paragraph,
    Spacer,
    Table,
    XPreformatted,
)

__all__ = ["Heading", "HtmlStory", "story_html"]

_PNG = b"\x89PNG\r\n\x1a\n"
#: bytes of one figure read back into the page: a report figure is far smaller
_MAX_FIGURE_BYTES = 16 * 1024 * 1024
#: paragraph style (by name) -> HTML element; the document title is the page's one <h1>
_BLOCKS = {"title": "h1", "h1": "h2", "h2": "h3", "h3": "h4"}
_SKIPPED = (Spacer, PageBreak, CondPageBreak)  # page layout only: nothing to show on a screen


@dataclass(frozen=True)
class Heading:
    """A numbered section heading of the report: its level (0 or 1), anchor id and text."""

    level: int
    anchor: str
    text: str


@dataclass
class HtmlStory:
    """The story as HTML, with its numbered headings (for the contents) and the figures placed."""

    body: str
    headings: list[Heading] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)


def story_html(story: Sequence[Flowable]) -> HtmlStory:
    r"""Translate the report's flowables, in order, into HTML.

    Parameters
    ----------
    story : sequence of Flowable
        What the section builders returned (:data:`sitecal.report.pdf.BUILDERS`), before layout.

    Returns
    -------
    HtmlStory
        The HTML of the story, its numbered headings with their anchors, and the figures' paths.

    Raises
    ------
    TypeError
        A flowable this module has no HTML form for (a new kind in a builder: add it here).
    DataError
        A figure that is not a PNG file of at most 16 MiB.

    Examples
    --------
    >>> from reportlab.lib.styles import ParagraphStyle
    >>> story_html([Paragraph("A &amp; <b>&lt;B&gt;</b>", ParagraphStyle("body"))]).body
    '<p>A &amp; <b>&lt;B&gt;</b></p>\n'
    """
    out = HtmlStory(body="")
    out.body = _Translator(out).flowables(list(story))
    return out


class _Translator:
    def __init__(self, out: HtmlStory) -> None:
        self.out = out
        self.depth = 0  # tables within tables: only the outermost scrolls and takes the focus

    def flowables(self, items: list[Any]) -> str:
        """HTML of a run of flowables: figures take the caption after them, tables the title before."""
        parts: list[str] = []
        i = 0
        while i < len(items):
            item = items[i]
            after = items[i + 1] if i + 1 < len(items) else None
            if isinstance(item, Image):
                caption = after if _styled(after, "caption") else None
                parts.append(self.figure(item, caption))
                i += 2 if caption is not None else 1
            elif _styled(item, "table_title") and isinstance(after, Table):
                parts.append(self.table(after, caption=item))
                i += 2
            elif isinstance(item, Paragraph) and getattr(item, "bulletText", None):
                bullets = [item]
                while i + len(bullets) < len(items) and _is_bullet(items[i + len(bullets)]):
                    bullets.append(items[i + len(bullets)])
                parts.append("<ul>\n" + "".join(f"<li>{inline(b)}</li>\n" for b in bullets) + "</ul>\n")
                i += len(bullets)
            else:
                parts.append(self.flowable(item))
                i += 1
        return "".join(parts)

    def flowable(self, item: Any) -> str:
        if isinstance(item, _SKIPPED):
            return ""
        if isinstance(item, KeepTogether):
            return self.flowables(list(item._content))
        if isinstance(item, XPreformatted):  # before Paragraph: it is one
            return f"<pre>{inline(item)}</pre>\n"
        if isinstance(item, Paragraph):
            return self.paragraph(item)
        if isinstance(item, Table):
            return self.table(item)
        if isinstance(item, Image):
            return self.figure(item, None)
        if isinstance(item, str):  # a plain table cell
            return escape(item)
        raise TypeError(
            f"report.html: no HTML form for a {type(item).__module__}.{type(item).__name__} in the report's "
            "story; give it one in sitecal.report._html_story (the view must show all the PDF shows)."
        )

    def paragraph(self, item: Paragraph) -> str:
        style = str(item.style.name)
        tag = _BLOCKS.get(style, "p")
        outline = getattr(item, "outline", None)
        if outline is not None:
            level, text = outline
            number = (
                str(text).split(maxsplit=1)[0] if str(text)[:1].isdigit() else str(len(self.out.headings))
            )
            anchor = "s" + re.sub(r"[^0-9]+", "-", number).strip("-")
            self.out.headings.append(Heading(level=int(level), anchor=anchor, text=str(text)))
            return f'<{tag} id="{anchor}">{inline(item)}</{tag}>\n'
        css = "" if tag != "p" or style in ("body", "cell") else f' class="{escape(style)}"'
        return f"<{tag}{css}>{inline(item)}</{tag}>\n"

    def figure(self, image: Image, caption: Paragraph | None) -> str:
        path = Path(str(image.filename))
        self.out.figures.append(path)
        alt = plain(caption) if caption is not None else f"Figure: {path.stem.replace('_', ' ')}"
        data = base64.b64encode(_png_bytes(path)).decode("ascii")
        below = f"<figcaption>{inline(caption)}</figcaption>" if caption is not None else ""
        return (
            f'<figure tabindex="0"><img src="data:image/png;base64,{data}" alt="{escape(alt)}" '
            f'width="{round(float(image.drawWidth))}" height="{round(float(image.drawHeight))}">'
            f"{below}</figure>\n"
        )

    def table(self, table: Table, *, caption: Paragraph | None = None) -> str:
        rows: list[list[Any]] = table._cellvalues
        n_rows, n_cols = len(rows), max((len(r) for r in rows), default=0)
        spans, covered = _spans(table, n_rows, n_cols)
        repeat = table.repeatRows
        head = repeat if isinstance(repeat, int) else (max(repeat) + 1 if repeat else 0)
        label = f' aria-label="{escape(plain(caption) if caption is not None else "Table")}"'
        wrap = self.depth == 0
        html = [f'<div class="table" role="region" tabindex="0"{label}>' if wrap else "", "<table>\n"]
        if caption is not None:
            html.append(f"<caption>{inline(caption)}</caption>\n")
        for r, row in enumerate(rows):
            if r == head and head:
                html.append("</thead>\n<tbody>\n")
            elif r == 0:
                html.append("<thead>\n" if head else "<tbody>\n")
            html.append("<tr>")
            for c, cell in enumerate(row):
                if (c, r) in covered:
                    continue
                header = r < head or _styled(cell, "cell_head")
                tag = "th" if header else "td"
                scope = f' scope="{"col" if r < head else "row"}"' if header else ""
                width, height = spans.get((c, r), (1, 1))
                span = (f' colspan="{width}"' if width > 1 else "") + (
                    f' rowspan="{height}"' if height > 1 else ""
                )
                numeric = (
                    ' class="num"' if _styled(cell, "cell_num") or _styled(cell, "cell_head_num") else ""
                )
                self.depth += 1
                html.append(f"<{tag}{scope}{span}{numeric}>{self.cell(cell)}</{tag}>")
                self.depth -= 1
            html.append("</tr>\n")
        html.append("</tbody>\n" if n_rows > head or not head else "</thead>\n")
        html.append("</table></div>\n" if wrap else "</table>\n")
        return "".join(html)

    def cell(self, cell: Any) -> str:
        if isinstance(cell, list | tuple):
            return "".join(self.cell(c) for c in cell)
        if cell is None:
            return ""
        if isinstance(cell, Paragraph) and not isinstance(cell, XPreformatted) and cell.style.name in _CELLS:
            return f"<div>{inline(cell)}</div>"
        return self.flowable(cell)


_CELLS = frozenset(("cell", "cell_num", "cell_head", "cell_head_num", "indent_cell", "mono", "note", "small"))


def _styled(item: object, prefix: str) -> bool:
    return isinstance(item, Paragraph) and str(item.style.name).startswith(prefix)


def _is_bullet(item: object) -> bool:
    return isinstance(item, Paragraph) and bool(getattr(item, "bulletText", None))


def _spans(table: Table, n_rows: int, n_cols: int) -> tuple[dict[tuple[int, int], tuple[int, int]], set[Any]]:
    """``(col, row) -> (colspan, rowspan)`` of each span's first cell, and the cells a span covers."""
    spans: dict[tuple[int, int], tuple[int, int]] = {}
    covered: set[tuple[int, int]] = set()
    for _, (x0, y0), (x1, y1) in table._spanCmds:  # as reportlab's Table._calcSpanRanges reads them
        x0, x1 = sorted((x0 + n_cols if x0 < 0 else x0, x1 + n_cols if x1 < 0 else x1))
        y0, y1 = sorted((y0 + n_rows if y0 < 0 else y0, y1 + n_rows if y1 < 0 else y1))
        if (x0, y0) == (x1, y1):
            continue
        spans[x0, y0] = (x1 - x0 + 1, y1 - y0 + 1)
        covered |= {(x, y) for x in range(x0, x1 + 1) for y in range(y0, y1 + 1)} - {(x0, y0)}
    return spans, covered


def _png_bytes(path: Path) -> bytes:
    from sitecal.errors import DataError

    try:
        with path.open("rb") as handle:
            data = handle.read(_MAX_FIGURE_BYTES + 1)
    except OSError as exc:
        raise DataError(f"{path}: cannot read the figure for report.html ({exc.strerror or exc}).") from None
    if len(data) > _MAX_FIGURE_BYTES or not data.startswith(_PNG):
        raise DataError(f"{path}: not a PNG figure of at most 16 MiB; render the report again.")
    return data


def plain(item: Paragraph) -> str:
    """The text of a paragraph, unescaped, on one line (for an ``alt`` or ``aria-label``)."""
    text = "".join(" " if getattr(f, "lineBreak", False) else str(f.text) for f in item.frags)
    return " ".join(text.split())


def inline(item: Paragraph) -> str:
    """A paragraph's fragments as escaped HTML: bold, italic, raised, lowered, coloured, line breaks."""
    base = getattr(item.style, "textColor", None)
    runs: list[tuple[tuple[bool, bool, int, str], str]] = []  # (look, escaped text); a look of "" breaks
    for frag in item.frags:
        if getattr(frag, "lineBreak", False):
            runs.append(((False, False, 0, "br"), ""))
            continue
        # a fragment without text draws something else (a callback, an inline image): none in sitecal's
        # paragraphs; one would show as nothing here, as it shows no text in the PDF
        text = escape(str(getattr(frag, "text", "")), quote=False)
        if not text:
            continue
        bold, italic = _weight(str(frag.fontName))
        rise = getattr(frag, "rise", 0) or 0
        color = getattr(frag, "textColor", None)
        ink = color.hexval()[2:] if isinstance(color, Color) and color != base else ""
        look = (bold, italic, (rise > 0) - (rise < 0), ink)
        if runs and runs[-1][0] == look:  # reportlab cuts a run at each entity: join it again
            runs[-1] = (look, runs[-1][1] + text)
        else:
            runs.append((look, text))
    return "".join(_run(look, text) for look, text in runs)


def _run(look: tuple[bool, bool, int, str], text: str) -> str:
    bold, italic, rise, ink = look
    if ink == "br":
        return "<br>"
    if bold:
        text = f"<b>{text}</b>"
    if italic:
        text = f"<i>{text}</i>"
    if rise:
        text = f"<sup>{text}</sup>" if rise > 0 else f"<sub>{text}</sub>"
    return f'<span style="color:#{ink}">{text}</span>' if ink else text


def _weight(font: str) -> tuple[bool, bool]:
    """Whether ``font`` is a bold and an italic face (reportlab's family table, else its name)."""
    try:
        _, bold, italic = ps2tt(font)
        return bool(bold), bool(italic)
    except ValueError:
        return "Bold" in font, "Oblique" in font or "Italic" in font
