"""Fonts of the report: DejaVu Sans for the text, Noto fonts for the characters DejaVu lacks.

A group name or a statement may be written in any script (an ``InstitutionName`` in Chinese, a
governance statement in Arabic, an emoji in a scanner's nickname). reportlab draws each run of text in
one font and does not fall back by itself, so the report does it: :func:`font_runs` cuts text into runs,
each tagged with the first font that has every character of the run.

- DejaVu Sans (shipped with matplotlib) sets Latin, Greek, Cyrillic, Arabic and Hebrew; characters that
  only its regular face has (most Arabic letters lack a bold and an oblique form) are set in the regular
  face whatever the style, rather than as empty boxes.
- Noto Sans SC, JP, KR and TC (``justmytype-intl-cjk``) set Chinese, Japanese and Korean; Noto Emoji,
  Noto Sans Symbols and the Noto Sans faces of other scripts (``manimgx-fonts``) set emoji in monochrome,
  symbols, and Indic, Thai and other scripts (unshaped: reportlab has no shaper for them). All are under
  the SIL Open Font License 1.1, and are embedded as subsets of the glyphs used. The CJK faces are
  variable fonts whose default instance, the one reportlab and matplotlib draw, is Thin (weight 100):
  legible, lighter than the text around it, and the same in every style.

A fallback package that is not installed is skipped with one warning; its characters then print in
DejaVu Sans as empty boxes (a PDF text extractor still finds them). Only package fonts are used, never
the system's, so two installs of sitecal print the same document.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import logging
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ParamSpec, TypeVar

import matplotlib
from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.pdfmetrics import stringWidth
from reportlab.pdfbase.ttfonts import TTFont

__all__ = [
    "ANY_FACE",
    "FALLBACKS",
    "Fallback",
    "Fonts",
    "break_line",
    "figure_families",
    "figure_fonts",
    "font_runs",
    "matplotlib_families",
    "matplotlib_lays_out_bidi",
    "register_fonts",
    "text_width",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Fonts:
    """Names of the registered fonts."""

    regular: str
    bold: str
    italic: str
    mono: str
    unicode: bool


@dataclass(frozen=True)
class Fallback:
    """A font for the characters DejaVu Sans lacks: its reportlab name, where it ships, its family name."""

    name: str
    package: str
    path: str
    family: str


_DEJAVU = {
    "regular": ("SitecalSans", "DejaVuSans.ttf"),
    "bold": ("SitecalSans-Bold", "DejaVuSans-Bold.ttf"),
    "italic": ("SitecalSans-Oblique", "DejaVuSans-Oblique.ttf"),
    "bold_italic": ("SitecalSans-BoldOblique", "DejaVuSans-BoldOblique.ttf"),
    "mono": ("SitecalMono", "DejaVuSansMono.ttf"),
}
#: DejaVu Sans regular under every style: for characters only the regular face has
ANY_FACE = "SitecalSans-AnyStyle"

_CJK = "justmytype_intl_cjk"
_NOTO = "manimgx_fonts"
# scripts with a Noto Sans face in manimgx-fonts (Arabic and Hebrew are DejaVu's)
_SCRIPTS = (
    "Devanagari Bengali Tamil Telugu Kannada Malayalam Gujarati Gurmukhi Oriya Sinhala Thai Lao Khmer "
    "Myanmar Georgian Armenian Ethiopic"
).split()
#: in the order tried; Simplified Chinese first, as it has the most Han characters and the kana
FALLBACKS: tuple[Fallback, ...] = (
    Fallback("SitecalCJK-SC", _CJK, "fonts/ofl/notosanssc/NotoSansSC[wght].ttf", "Noto Sans SC"),
    Fallback("SitecalCJK-JP", _CJK, "fonts/ofl/notosansjp/NotoSansJP[wght].ttf", "Noto Sans JP"),
    Fallback("SitecalCJK-KR", _CJK, "fonts/ofl/notosanskr/NotoSansKR[wght].ttf", "Noto Sans KR"),
    Fallback("SitecalCJK-TC", _CJK, "fonts/ofl/notosanstc/NotoSansTC[wght].ttf", "Noto Sans TC"),
    Fallback("SitecalEmoji", _NOTO, "NotoEmoji[wght].ttf", "Noto Emoji"),
    Fallback("SitecalSymbols", _NOTO, "NotoSansSymbols[wght].ttf", "Noto Sans Symbols"),
    *(
        Fallback(f"SitecalNoto-{script}", _NOTO, f"NotoSans{script}[wght].ttf", f"Noto Sans {script}")
        for script in _SCRIPTS
    ),
    Fallback("SitecalNoto", _NOTO, "NotoSans[wght].ttf", "Noto Sans"),
)


def _dejavu_folder() -> Path:
    return Path(matplotlib.get_data_path()) / "fonts" / "ttf"


@functools.cache
def register_fonts() -> Fonts:
    """Register DejaVu Sans (shipped with matplotlib) with reportlab, once per process.

    reportlab's built-in Helvetica covers Latin-1 only, and a group name taken from a DICOM header may
    hold any character. Where the DejaVu files are missing the report falls back to Helvetica and logs a
    warning; the fallback fonts of :data:`FALLBACKS` still set what Helvetica lacks.
    """
    folder = _dejavu_folder()
    registered = set(pdfmetrics.getRegisteredFontNames())
    try:
        for name, filename in [*_DEJAVU.values(), (ANY_FACE, _DEJAVU["regular"][1])]:
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
    _one_face_family(ANY_FACE)
    return Fonts(family, _DEJAVU["bold"][0], _DEJAVU["italic"][0], _DEJAVU["mono"][0], unicode=True)


def _one_face_family(name: str) -> None:
    # a fallback run inside <b> or <i> keeps its font: the family maps every style to the one face
    pdfmetrics.registerFontFamily(name, normal=name, bold=name, italic=name, boldItalic=name)


def _charset(font: TTFont) -> frozenset[int]:
    return frozenset(font.face.charToGlyph)


@functools.cache
def _base_coverage() -> tuple[frozenset[int], frozenset[int]]:
    """Code points every DejaVu face has, and those only the regular face has."""
    fonts = register_fonts()
    if not fonts.unicode:
        latin1 = frozenset(range(0x20, 0x7F)) | frozenset(range(0xA0, 0x100))
        return latin1, frozenset()
    faces = [_charset(pdfmetrics.getFont(name)) for name, _ in _DEJAVU.values()]
    every = frozenset.intersection(*faces)
    return every, faces[0] - every


def _fallback_file(fallback: Fallback) -> Path | None:
    spec = importlib.util.find_spec(fallback.package)
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / fallback.path
    return path if path.is_file() else None


@functools.cache
def _fallback_coverage() -> tuple[tuple[str, frozenset[int]], ...]:
    """Register the fallback fonts that are installed; their names and code points, in order."""
    out: list[tuple[str, frozenset[int]]] = []
    missing: set[str] = set()
    for fallback in FALLBACKS:
        path = _fallback_file(fallback)
        if path is None:
            missing.add(fallback.package.replace("_", "-"))
            continue
        try:
            if fallback.name not in pdfmetrics.getRegisteredFontNames():
                pdfmetrics.registerFont(TTFont(fallback.name, str(path)))
            _one_face_family(fallback.name)
            out.append((fallback.name, _charset(pdfmetrics.getFont(fallback.name))))
        except Exception as exc:  # an unreadable font loses its characters, not the report
            log.warning("font %s not usable (%s); its characters print as empty boxes", path.name, exc)
    if missing:
        log.warning(
            "fonts for characters DejaVu Sans lacks (CJK, emoji, other scripts) are not installed; those "
            "characters print as empty boxes. Install them with: pip install %s",
            " ".join(sorted(missing)),
        )
    return tuple(out)


def _invisible(char: str) -> bool:
    # zero-width format characters and variation selectors: without a glyph they would print as boxes
    code = ord(char)
    return unicodedata.category(char) == "Cf" or 0xFE00 <= code <= 0xFE0F or 0xE0100 <= code <= 0xE01EF


@functools.lru_cache(maxsize=4096)
def _font_of(char: str) -> str | None:
    """The font for one character: ``None`` for DejaVu in the current style, else a font name.

    Returns ``""`` for an invisible character that no font has (it is dropped).
    """
    code = ord(char)
    every, regular_only = _base_coverage()
    if code in every:
        return None
    if code in regular_only:
        return ANY_FACE
    for name, charset in _fallback_coverage():
        if code in charset:
            return name
    return "" if _invisible(char) else None


def font_runs(text: str) -> list[tuple[str | None, str]]:
    """Cut ``text`` into runs that one font can set.

    Parameters
    ----------
    text : str
        Plain text (not markup), already in display order.

    Returns
    -------
    list of (font name or None, str)
        ``None`` means the current DejaVu style (regular, bold, ...), which also sets characters that no
        font has (as empty boxes); a name is a registered reportlab font. Zero-width format characters
        that no font has are dropped. Adjacent runs differ in font.

    Examples
    --------
    >>> font_runs("Site 1")
    [(None, 'Site 1')]
    """
    every, _ = _base_coverage()
    if all(ord(c) in every for c in text):  # the common case: one run, no look-up per character
        return [(None, text)] if text else []
    runs: list[tuple[str | None, str]] = []
    for char in text:
        font = _font_of(char)
        if font == "":
            continue
        if runs and runs[-1][0] == font:
            runs[-1] = (font, runs[-1][1] + char)
        else:
            runs.append((font, char))
    return runs


def text_width(runs: Iterable[tuple[str | None, str]], font: str, size: float) -> float:
    """Width in points of ``runs`` (from :func:`font_runs`) set in ``font`` at ``size``."""
    return float(sum(stringWidth(text, name or font, size) for name, text in runs))


def break_line(text: str, font: str, size: float, width: float) -> list[str]:
    """Cut one line of plain text into pieces no wider than ``width`` points, at any character.

    For preformatted text (the protocol as run), whose lines are kept as typed and only broken where
    they would run off the page; widths count each character in the font that sets it, so a line of
    CJK characters (about twice as wide as Latin) is broken as early as it must be.

    Examples
    --------
    >>> break_line("abcdef", "Courier", 10, 18.0)
    ['abc', 'def']
    """
    every, _ = _base_coverage()
    pieces: list[str] = []
    start, used = 0, 0.0
    for position, char in enumerate(text):
        name = None if ord(char) in every else _font_of(char)
        if name == "":  # dropped when drawn: no width
            continue
        advance = stringWidth(char, name or font, size)
        if used + advance > width and position > start:
            pieces.append(text[start:position])
            start, used = position, 0.0
        used += advance
    pieces.append(text[start:])
    return pieces


@functools.cache
def matplotlib_lays_out_bidi() -> bool:
    """Whether matplotlib shapes and orders text itself (built with libraqm, as 3.11 wheels are).

    Such a matplotlib takes text in stored (logical) order and applies the bidirectional algorithm
    and Arabic joining itself; reordering first would reverse right-to-left text twice.
    """
    from matplotlib import ft2font

    return hasattr(ft2font, "__libraqm_version__")


@functools.cache
def matplotlib_families() -> tuple[str, ...]:
    """Font families for matplotlib's ``font.family``: DejaVu Sans, then the installed fallbacks.

    matplotlib (3.6 and later) takes each glyph from the first family in the list that has it. The
    fallback files are added to matplotlib's font manager once; nothing else of matplotlib is changed.
    """
    from matplotlib import font_manager

    families = ["DejaVu Sans"]
    for fallback in FALLBACKS:
        path = _fallback_file(fallback)
        if path is None or fallback.family in families:
            continue
        manager = font_manager.fontManager
        try:
            manager.addfont(str(path))
        except Exception as exc:  # a font matplotlib cannot read only loses its glyphs in the figures
            log.warning("font %s not usable in figures (%s)", path.name, exc)
            continue
        # matplotlib draws a variable font's default instance (Thin, weight 100, for the CJK faces) and
        # warns for every text whose weight the family lacks: list that one face as normal and bold.
        entries = [e for e in manager.ttflist if e.fname == str(path)][:1]
        manager.ttflist = [e for e in manager.ttflist if e.fname != str(path)] + [
            dataclasses.replace(entry, name=fallback.family, style="normal", weight=weight)
            for entry in entries
            for weight in (400, 700)
        ]
        families.append(fallback.family)
    return tuple(families)


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _strings(value: object, depth: int = 0) -> Iterator[str]:
    """Every string inside ``value``: mappings (keys too), sequences, sets and dataclasses, 12 levels deep."""
    if isinstance(value, str):
        yield value
    elif depth >= 12:
        return
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _strings(key, depth + 1)
            yield from _strings(item, depth + 1)
    elif isinstance(value, list | tuple | set | frozenset):
        for item in value:
            yield from _strings(item, depth + 1)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for item in dataclasses.fields(value):
            yield from _strings(getattr(value, item.name), depth + 1)


def figure_families(texts: Iterable[str]) -> tuple[str, ...]:
    """DejaVu Sans and, of :func:`matplotlib_families`, only the fallbacks some character of ``texts`` needs.

    matplotlib looks each text's font up once per family of the list, so the full list (25 families)
    makes every label 25 look-ups; most reports need DejaVu Sans alone. A character takes the first
    fallback that has it here as in the full list, so the figure draws the same glyphs.

    Examples
    --------
    >>> figure_families(["Site 1", "CT-A"])
    ('DejaVu Sans',)
    """
    available = matplotlib_families()
    every, regular_only = _base_coverage()
    needed: set[str] = set()
    for text in texts:
        for char in set(text):
            if ord(char) in every or ord(char) in regular_only:
                continue
            name = _font_of(char)
            if name:
                needed.add(name)
    wanted = {f.family for f in FALLBACKS if f.name in needed}
    return (available[0], *(family for family in available[1:] if family in wanted))


def _families_of(args: tuple[object, ...], kwargs: Mapping[str, object]) -> tuple[str, ...]:
    """The families a figure function needs: from the strings it is given, or a figure's own texts."""
    from matplotlib.figure import Figure
    from matplotlib.text import Text

    values = [*args, *kwargs.values()]
    figures = [v for v in values if isinstance(v, Figure)]
    if not figures:
        return figure_families(_strings(values))
    used = {
        family
        for fig in figures
        for text in fig.findobj(Text)
        for family in text.get_fontfamily()  # what the texts were made with (see figure_fonts)
    }
    return tuple(family for family in matplotlib_families() if family in used) or matplotlib_families()[:1]


def figure_fonts(func: Callable[_P, _R]) -> Callable[_P, _R]:
    """Run ``func`` with the font families its text needs as matplotlib's font family, then restore it.

    matplotlib reads ``font.family`` when it makes each text (titles, tick labels, which it may make
    while saving), so both the functions that draw figures and the one that saves them are wrapped: a
    drawing function gets DejaVu Sans and the fallbacks its arguments' strings need
    (:func:`figure_families`), a function given a figure the families its texts were made with.
    """

    @functools.wraps(func)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with matplotlib.rc_context({"font.family": list(_families_of(args, kwargs))}):
            return func(*args, **kwargs)

    return wrapper
