"""The PDF report on hostile text: any script, any length, markup and control characters.

A header value becomes a group name and a protocol field becomes a statement, so the report must print
whatever they hold: 10,000 characters without a space (reportlab's LayoutError stopped the document),
Chinese, Arabic and Hebrew (empty boxes, right-to-left text in stored order), emoji, markup and control
characters. The report is rendered from the JSON fixtures of ``tests/report`` (no pipeline run), once
for the module; the other tests check the text helpers that make it work.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import unicodedata
from pathlib import Path
from typing import Any

import pypdf
import pytest
from reportlab.lib.pagesizes import A4
from reportlab.pdfbase.pdfmetrics import stringWidth
from reportlab.platypus import Frame, PageTemplate, Paragraph, Table

from sitecal.report import ReportArtifacts, ReportInputs, render_report
from sitecal.report._fonts import (
    break_line,
    figure_families,
    figure_fonts,
    font_runs,
    matplotlib_families,
    matplotlib_lays_out_bidi,
    register_fonts,
)
from sitecal.report._styles import CELL_MAX_HEIGHT, CUT_NOTE, fit_cell, make_styles, table
from sitecal.report._text import display_order, para_text, plot_text
from sitecal.report.pdf import LEFT_OUT, _Document, _Running

FIXTURES = Path(__file__).parents[1] / "report" / "fixtures"

LONG_NAME = ("Northfield" * 1000)[:10_000]  # one word: nothing to break a line at
CJK = "上海第一医院"
ARABIC = "مستشفى الملك"
HEBREW = "בית חולים"
EMOJI = "Röntgen 😀🏥"
MARKUP = "<b>&amp;\x00\x1b"
# 909 words of 10 letters, 908 spaces and "!!": exactly 10,000 characters, countable in the text
STATEMENT = " ".join(["Ethikvotum"] * 909) + "!!"

# every fixture group renamed, everywhere it is named (evaluation and calibration)
RENAMES = {
    "Northfield General Hospital": LONG_NAME,  # a site
    "Riverside Community Clinic": CJK,
    "GE Definium 656": ARABIC,  # scanners
    "Siemens Ysio Max": HEBREW,
    "Philips DigitalDiagnost C90": EMOJI,
    "Carestream DRX-Evolution Plus": MARKUP,
}


def _parts() -> dict[str, Any]:
    text = json.dumps(
        {
            name: json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
            for name in ("evaluation", "calibration", "provenance", "protocol")
        }
    )
    for old, new in RENAMES.items():
        assert json.dumps(old) in text, old  # the fixture still names this group
        text = text.replace(json.dumps(old), json.dumps(new))
    parts: dict[str, Any] = json.loads(text)
    parts["protocol"]["governance"] = {
        "ethics_approval": STATEMENT,
        "reference_standard": f"Two readers at {CJK}; {ARABIC}.",
        "interpretation": HEBREW,
        "human_oversight": MARKUP,
    }
    return parts


def _poppler(pdf: Path) -> str:
    if shutil.which("pdftotext") is None:
        pytest.fail("pdftotext (poppler-utils) is not installed: run .ci/run, which installs it")
    out = subprocess.run(
        ["pdftotext", "-enc", "UTF-8", str(pdf), "-"], check=True, capture_output=True, encoding="utf-8"
    ).stdout
    # poppler marks right-to-left runs with embedding controls, and extracts Arabic in the joined
    # (presentation) forms the PDF draws: NFKC maps those back to the letters typed
    return unicodedata.normalize("NFKC", out.translate({0x202A: None, 0x202B: None, 0x202C: None}))


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> tuple[ReportArtifacts, float]:
    parts = _parts()
    inputs = ReportInputs(parts["evaluation"], parts["calibration"], parts["provenance"], parts["protocol"])
    start = time.perf_counter()
    artifacts = render_report(inputs, tmp_path_factory.mktemp("hostile"))
    return artifacts, time.perf_counter() - start


@pytest.fixture(scope="module")
def hostile_text(hostile: tuple[ReportArtifacts, float]) -> str:
    return _poppler(hostile[0].pdf)


@pytest.mark.timeout(120)
def test_hostile_text_gives_a_whole_report(hostile: tuple[ReportArtifacts, float], hostile_text: str) -> None:
    artifacts, _ = hostile
    assert artifacts.pdf.read_bytes().startswith(b"%PDF-")
    assert artifacts.figures and all(f.is_file() for f in artifacts.figures)
    # every section is there (the crosswalk is the last), and nothing was left out by the safety net
    assert "Reporting-guideline crosswalk" in hostile_text
    assert "Left out here" not in hostile_text


@pytest.mark.timeout(120)
def test_every_script_reads_back_from_the_pdf(hostile_text: str) -> None:
    for name in (CJK, ARABIC, HEBREW, "Röntgen"):
        assert name in hostile_text, name
    # in full, in logical order: the bidirectional reordering is undone by the reader, not garbled
    assert f"Two readers at {CJK}; {ARABIC}." in " ".join(hostile_text.split())


@pytest.mark.timeout(120)
def test_cjk_and_emoji_are_set_in_fonts_that_have_them(hostile: tuple[ReportArtifacts, float]) -> None:
    fonts = set()
    for page in pypdf.PdfReader(hostile[0].pdf).pages:
        resources = page.get("/Resources") or {}
        for font in (resources.get("/Font") or {}).values():
            fonts.add(str(font.get_object()["/BaseFont"]).split("+")[-1])
    assert {"NotoSansSC-Thin", "NotoEmoji-Regular", "DejaVuSans"} <= fonts, fonts


@pytest.mark.timeout(120)
def test_markup_and_control_characters_print_literally(hostile_text: str) -> None:
    assert "<b>&amp;\ufffd\ufffd" in hostile_text  # escape kept, controls shown as U+FFFD
    assert "&lt;" not in hostile_text and "&amp;amp;" not in hostile_text


@pytest.mark.timeout(120)
def test_a_10000_character_name_is_cut_and_a_statement_printed_whole(hostile_text: str) -> None:
    # beside its numbers a name is cut at 120 characters and says so (NFKC reads "…" as "...")
    assert f"{LONG_NAME[:119]}...(shortened from 10,000characters)n = 541 studies" in hostile_text.replace(
        "\n", ""
    )
    # a table cell holding only the name keeps what fits and says it was cut
    assert unicodedata.normalize("NFKC", CUT_NOTE) in " ".join(hostile_text.split())
    # the site's own statement is never cut: every word of it is printed, once
    assert hostile_text.count("Ethikvotum") == 909


@pytest.mark.timeout(120)
def test_para_text_orders_joins_and_sets_each_script() -> None:
    register_fonts()
    # Arabic: joined forms (final alef maksura, medial fa, ...), right to left, in DejaVu's regular face
    assert para_text("مستشفى") == '<font face="SitecalSans-AnyStyle">ﻰﻔﺸﺘﺴﻣ</font>'
    assert display_order("בית חולים 12") == "12 םילוח תיב"
    assert para_text(CJK) == f'<font face="SitecalCJK-SC">{CJK}</font>'
    assert para_text("X 🏥") == 'X <font face="SitecalEmoji">🏥</font>'
    # a right-to-left override cannot make stored text read backwards: it is dropped
    assert para_text("\u202eabc\u202c") == "abc"
    # a multi-valued header value prints the way DICOM writes it, not as a Python list
    assert para_text(["ORIGINAL", "PRIMARY"]) == "ORIGINAL\\PRIMARY"
    # matplotlib 3.11 orders and joins text itself (libraqm): the label is isolated, in stored order;
    # an older one gets it in display order
    expected = "\u2068שלום \\$5\u2069" if matplotlib_lays_out_bidi() else "$5\\ םולש"
    assert plot_text("שלום $5") == expected
    assert plot_text("Site $5") == r"Site \$5"
    assert font_runs("Site 1") == [(None, "Site 1")]


@pytest.mark.timeout(30)
def test_figures_fall_back_to_the_same_fonts() -> None:
    families = matplotlib_families()
    assert families[:2] == ("DejaVu Sans", "Noto Sans SC")
    assert "Noto Emoji" in families


def _labels_figure(names: list[str]):  # type: ignore[no-untyped-def]
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(3, 2))
    ax.set_yticks(range(len(names)), names)
    ax.set_title(names[0])
    return fig


def _png(fig) -> bytes:  # type: ignore[no-untyped-def]
    from io import BytesIO

    buffer = BytesIO()
    fig.savefig(buffer, format="png", dpi=60)
    return buffer.getvalue()


@pytest.mark.timeout(60)
def test_a_figure_lists_only_the_fallbacks_its_text_needs_and_draws_the_same_glyphs() -> None:
    import matplotlib
    import matplotlib.pyplot as plt

    names = ["Site 1", "北京 CT", "Scanner 🙂", "नमस्ते", "שלום"]
    assert figure_families(["Site 1", "שלום"]) == ("DejaVu Sans",)  # DejaVu sets Hebrew
    assert figure_families(names) == ("DejaVu Sans", "Noto Sans SC", "Noto Emoji", "Noto Sans Devanagari")
    few = figure_fonts(_labels_figure)(names)
    png_few = figure_fonts(_png)(few)
    with matplotlib.rc_context({"font.family": list(matplotlib_families())}):
        every = _labels_figure(names)
        png_every = _png(every)
    assert {tuple(t.get_fontfamily()) for t in few.axes[0].get_yticklabels()} == {figure_families(names)}
    assert png_few == png_every  # the same glyphs from the same fonts, with 4 families instead of 25
    # the fallbacks do draw something here: DejaVu Sans alone lacks the glyphs
    with matplotlib.rc_context({"font.family": ["DejaVu Sans"]}), pytest.warns(UserWarning, match="missing"):
        assert _png(_labels_figure(names)) != png_every
    plt.close("all")


@pytest.mark.timeout(30)
def test_a_long_cell_is_cut_to_a_fixed_height_with_a_note() -> None:
    styles = make_styles(register_fonts())
    cell = Paragraph(para_text(LONG_NAME), styles.cell)
    first, note = fit_cell(cell, 100.0)
    assert note.text == CUT_NOTE
    height = sum(part.wrap(93.0, 1e9)[1] for part in (first, note))
    assert 100 < height <= CELL_MAX_HEIGHT
    short = Paragraph("n = 12", styles.cell)
    assert fit_cell(short, 100.0) is short
    # the statements table keeps the cell whole and lets the row run on to the next page
    whole = table([["a", cell]], [50.0, 100.0], header=False, split_cells=True)
    assert whole._cellvalues[0][1] is cell and whole.splitInRow == 1


@pytest.mark.timeout(30)
def test_a_flowable_that_cannot_fit_is_replaced_by_a_note(tmp_path: Path) -> None:
    styles = make_styles(register_fonts())
    pdf = tmp_path / "note.pdf"
    doc = _Document(str(pdf), pagesize=A4)
    doc.addPageTemplates([PageTemplate(id="page", frames=[Frame(0, 0, *A4, id="body")])])
    doc.styles = styles
    too_tall = Table([["x"]], rowHeights=[2 * A4[1]])  # one row twice the page height
    doc.build([Paragraph("before", styles.body), too_tall, Paragraph("after", styles.body)])
    text = " ".join(_poppler(pdf).split())
    assert text == f"before {LEFT_OUT.format(kind='table')} after"
    assert doc.left_out == 1


@pytest.mark.timeout(30)
def test_running_header_cuts_a_long_title_quickly() -> None:
    fonts = register_fonts()
    running = _Running(title=LONG_NAME, right="", footer_left="", fonts=fonts)
    start = time.perf_counter()
    runs = running._fit(LONG_NAME, fonts.bold, 7.5, 300.0)
    assert time.perf_counter() - start < 2.0  # was a loop of 10,000 width measurements of the whole title
    ((font, text),) = runs
    assert font is None and text.endswith("…") and LONG_NAME.startswith(text[:-1])
    # the longest start of the title that fits with its ellipsis
    longer = LONG_NAME[: len(text)] + "…"
    assert stringWidth(text, fonts.bold, 7.5) <= 300.0 < stringWidth(longer, fonts.bold, 7.5)


@pytest.mark.timeout(30)
def test_protocol_lines_break_at_the_margin_by_width() -> None:
    fonts = register_fonts()
    # a CJK character is about twice as wide as a Latin one in the mono face: fewer fit on a line
    latin = break_line("a" * 300, fonts.mono, 7.2, 200.0)
    cjk = break_line(CJK * 50, fonts.mono, 7.2, 200.0)
    assert "".join(latin) == "a" * 300 and "".join(cjk) == CJK * 50
    assert len(latin[0]) > 1.5 * len(cjk[0])
