"""report.html: the PDF's story translated (text, tables, figures), read back by headless Chromium."""

from __future__ import annotations

import base64
import copy
import html
import re
import shutil
import subprocess
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import PIL.Image
import pytest
from reportlab.lib.styles import ParagraphStyle
from reportlab.platypus import Flowable, Image, KeepTogether, PageBreak, Paragraph, Spacer, Table

from sitecal.errors import DataError
from sitecal.report import ReportArtifacts, render_report
from sitecal.report import pdf as pdf_module
from sitecal.report._text import para_text
from sitecal.report._wording import criterion_text
from sitecal.report.html import CONTENT_SECURITY_POLICY, html_document

BODY = ParagraphStyle("body")
HOSTILE = '<script>alert("x")</script> & <img src=x onerror=alert(1)>'
PNG = b"\x89PNG\r\n\x1a\n"


class Page(HTMLParser):
    """The elements of an HTML page (tag, attributes) and its text, squashed, outside <style>/<title>."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.chunks: list[str] = []
        self._skip = 0
        self.feed(html)
        self.text = " ".join("".join(self.chunks).split())

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}))
        if tag in ("p", "div", "td", "th", "li", "br", "h1", "h2", "h3", "h4", "figcaption", "caption"):
            self.chunks.append(" ")  # a cell or a block ends a word
        self._skip += tag in ("style", "title")

    def handle_endtag(self, tag: str) -> None:
        self._skip -= tag in ("style", "title")

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.chunks.append(data)

    def all(self, tag: str) -> list[dict[str, str]]:
        return [attrs for name, attrs in self.elements if name == tag]


def body_of(story: list[Any]) -> str:
    page, _ = html_document(story, title="t", verdict="pass", draft=False)
    return page.split('<main id="report" tabindex="-1">\n', 1)[1]


# -- the translation --


def test_text_is_escaped_and_only_known_tags_come_through() -> None:
    markup = (
        f"{para_text(HOSTILE)} <b>bold</b> <i>it</i> x<super>2</super> y<sub>i</sub><br/>"
        '<font color="#a61c1c">red</font>'
    )
    body = body_of([Paragraph(markup, BODY)])
    assert "<script" not in body and "<img" not in body
    assert '&lt;script&gt;alert("x")&lt;/script&gt; &amp; &lt;img src=x onerror=alert(1)&gt;' in body
    assert "<b>bold</b>" in body and "<i>it</i>" in body
    assert "x<sup>2</sup>" in body and "y<sub>i</sub>" in body
    assert '<br><span style="color:#a61c1c">red</span>' in body
    assert (
        f"Overall verdict: Pass {HOSTILE} bold" in Page(body).text
    )  # shown as text, character for character


def test_hostile_title_is_text_in_the_head() -> None:
    page, _ = html_document([], title=HOSTILE, verdict="fail", draft=True)
    assert page.count("<script") == 0
    assert f"<title>{html.escape(HOSTILE)}</title>" in page


def test_a_table_keeps_header_spans_and_row_headers() -> None:
    head = ParagraphStyle("cell_head")
    num = ParagraphStyle("cell_num")
    rows = [
        [Paragraph("Group", head), Paragraph("n", head), Paragraph("ECE", head)],
        [Paragraph("Site A", head), Paragraph("12", num), "<raw & str>"],
        ["spanned", None, None],
    ]
    table = Table(rows, repeatRows=1, style=[("SPAN", (0, 2), (-1, 2))])
    caption = Paragraph("<b>Table 1.</b> Sizes", ParagraphStyle("table_title"))
    body = body_of([caption, table])
    assert "<caption><b>Table 1.</b> Sizes</caption>" in body
    assert 'aria-label="Table 1. Sizes"' in body
    assert '<thead>\n<tr><th scope="col"><div>Group</div></th>' in body
    assert '<th scope="row"><div>Site A</div></th><td class="num"><div>12</div></td>' in body
    assert "<td>&lt;raw &amp; str&gt;</td>" in body
    assert '<tr><td colspan="3">spanned</td></tr>' in body  # the covered cells are left out


def test_a_figure_is_a_data_uri_with_its_caption_as_alt(tmp_path: Path) -> None:
    png = tmp_path / "fig.png"
    PIL.Image.new("RGB", (2, 1), (200, 30, 30)).save(png)
    caption = Paragraph(f"Figure 1. {para_text('<b>Site</b> & co')}", ParagraphStyle("caption"))
    page, story = html_document(
        [KeepTogether([Image(str(png), width=20, height=10), caption])],
        title="t",
        verdict="pass",
        draft=False,
    )
    (img,) = Page(page).all("img")
    assert img["alt"] == "Figure 1. <b>Site</b> & co"
    assert base64.b64decode(img["src"].removeprefix("data:image/png;base64,")) == png.read_bytes()
    assert "<figcaption>Figure 1. &lt;b&gt;Site&lt;/b&gt; &amp; co</figcaption>" in page
    assert story.figures == [png]


def test_a_figure_that_is_not_a_png_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "fig.png"
    bad.write_bytes(b"GIF89a")
    with pytest.raises(DataError, match=r"fig\.png: not a PNG figure of at most 16 MiB"):
        body_of([Image(str(bad), width=20, height=10)])


def test_layout_only_flowables_are_skipped_and_an_unknown_one_is_refused() -> None:
    assert body_of([Spacer(1, 9), PageBreak()]).startswith('<div class="verdict-box"')

    class Gauge(Flowable):  # type: ignore[misc]
        def draw(self) -> None:
            pass

    with pytest.raises(TypeError, match=r"no HTML form for a .*\.Gauge in the report's story"):
        body_of([KeepTogether([Paragraph("ok", BODY), Gauge()])])


# -- the whole report --


def chromium_dom(page: Path, tmp_path: Path) -> tuple[str, str]:
    """The DOM of ``page`` after Chromium loaded and laid it out, and what Chromium logged."""
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        pytest.fail("chromium is not installed: run .ci/run, which installs it (Debian package 'chromium')")
    done = subprocess.run(
        [
            binary,
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'chromium-profile'}",
            "--host-resolver-rules=MAP * ~NOTFOUND",  # no name resolves: nothing could be fetched anyway
            "--enable-logging=stderr",
            "--v=0",
            "--dump-dom",
            page.resolve().as_uri(),
        ],
        capture_output=True,
        encoding="utf-8",
        errors="replace",
        timeout=90,
        check=True,
    )
    return done.stdout, done.stderr


def blocked(log: str) -> list[str]:
    """Chromium's lines on the page's console (a load the CSP blocked lands there) or a failed load."""
    return [
        line for line in log.splitlines() if re.search(r":CONSOLE|Content Security Policy|net::ERR_", line)
    ]


def test_the_blocked_load_detector_sees_a_page_that_asks_for_the_network(tmp_path: Path) -> None:
    page = tmp_path / "leaky.html"
    page.write_text(
        f'<!DOCTYPE html><html lang="en"><head><meta http-equiv="Content-Security-Policy" '
        f'content="{CONTENT_SECURITY_POLICY}"></head><body><img src="https://example.com/x.png" alt="x">'
        "</body></html>",
        encoding="utf-8",
    )
    _, log = chromium_dom(page, tmp_path)
    assert blocked(log), log[-2000:]


def test_chromium_shows_the_verdict_every_criterion_and_every_figure(
    raw: dict[str, Any], report: ReportArtifacts, tmp_path: Path
) -> None:
    assert report.html == report.pdf.with_name("report.html")
    dom, log = chromium_dom(report.html, tmp_path)
    assert blocked(log) == [], blocked(log)
    page = Page(dom)
    assert page.all("html")[0]["lang"] == "en"
    # the verdict, in the box at the top, as the report words it
    verdict = raw["evaluation"]["verdict"]
    assert re.search(rf"Overall verdict: {re.escape(verdict.capitalize())} ", page.text)
    assert any(d.get("role") == "status" and d.get("class") == "verdict-box" for d in page.all("div"))
    # every criterion, by the words the report prints for it
    criteria = raw["evaluation"]["acceptance"]
    assert criteria
    for criterion in criteria:
        assert " ".join((criterion.get("description") or criterion_text(criterion)).split()) in page.text
    # every figure the PDF embeds, as a PNG data: URI, in order
    images = page.all("img")
    assert len(images) == pdf_image_count(report.pdf) == len(report.figures)
    for img, figure in zip(images, report.figures, strict=True):
        assert img["src"].startswith("data:image/png;base64,")
        data = base64.b64decode(img["src"].removeprefix("data:image/png;base64,"), validate=True)
        assert data.startswith(PNG) and data == figure.read_bytes()
        assert img["alt"].startswith("Figure ")


def test_the_page_needs_nothing_outside_itself_and_can_be_read_by_keyboard(report: ReportArtifacts) -> None:
    html = report.html.read_text(encoding="utf-8")
    page = Page(html)
    tags = {tag for tag, _ in page.elements}
    assert not tags & {"script", "link", "iframe", "object", "embed", "base", "form", "audio", "video"}
    for tag, attrs in page.elements:
        for name in ("src", "href", "srcset", "action", "poster", "data"):
            value = attrs.get(name)
            assert value is None or value.startswith(("#", "data:image/png;base64,")), (tag, name, value[:80])
    assert "url(" not in html and "@import" not in html
    (csp,) = [m for m in page.all("meta") if m.get("http-equiv") == "Content-Security-Policy"]
    assert csp["content"].startswith("default-src 'none'; img-src data:;")
    # a skip link first, a contents list of every numbered section, and each link lands on a heading
    first_link = page.all("a")[0]
    assert first_link == {"class": "skip", "href": "#report"}
    ids = {attrs["id"] for _, attrs in page.elements if "id" in attrs}
    links = [a["href"][1:] for a in page.all("a")]
    assert "report" in ids and set(links) <= ids
    headings = [attrs["id"] for tag, attrs in page.elements if tag in ("h2", "h3") and "id" in attrs]
    assert len(headings) >= 20 and set(headings) <= set(links)
    assert all(f.get("tabindex") == "0" for f in page.all("figure"))
    assert ":focus-visible" in html
    # the figures are most of the bytes: the page stays within a third more than the PNGs it carries
    assert len(html.encode()) < sum(p.stat().st_size for p in report.figures) * 4 / 3 + 400_000


def pdf_image_count(pdf: Path) -> int:
    if shutil.which("pdfimages") is None:
        pytest.fail("pdfimages (poppler-utils) is not installed: run .ci/run, which installs it")
    listing = subprocess.run(
        ["pdfimages", "-list", str(pdf)], capture_output=True, encoding="utf-8", check=True
    )
    return sum(1 for line in listing.stdout.splitlines()[2:] if line.split()[2:3] == ["image"])


def test_hostile_dicom_text_is_shown_as_text_by_chromium(
    lean: dict[str, Any], build: Callable[..., ReportArtifacts], tmp_path: Path
) -> None:
    lean["evaluation"]["subgroups"]["scanner"][0]["group"] = HOSTILE
    lean["evaluation"]["acceptance"][1]["results"][0]["group"] = HOSTILE
    lean["protocol"]["title"] = HOSTILE
    artifacts = build(lean)
    dom, log = chromium_dom(artifacts.html, tmp_path)
    page = Page(dom)
    assert "script" not in {tag for tag, _ in page.elements}
    assert not any("onerror" in attrs for _, attrs in page.elements)
    assert page.text.count(HOSTILE) >= 3  # title, results table, acceptance table
    assert blocked(log) == []


def test_the_html_view_leaves_the_pdf_unchanged(
    lean: dict[str, Any], inputs: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1796320800")
    with_html = render_report(inputs(copy.deepcopy(lean)), tmp_path / "a").pdf.read_bytes()
    monkeypatch.setattr(pdf_module, "html_document", lambda *a, **k: ("", None))
    without = render_report(inputs(copy.deepcopy(lean)), tmp_path / "b").pdf.read_bytes()
    assert with_html.replace(b"/b/", b"/a/") == without.replace(b"/b/", b"/a/")
