"""The report as one self-contained HTML file, ``report.html``, written beside ``report.pdf``.

It is drawn from the same story the PDF is laid out from (:mod:`._html_story` translates the flowables),
so it holds the same sections, tables and figures in the same order. It needs nothing but itself: the
styles are inline, the figures are PNG ``data:`` URIs, there is no script, and a Content-Security-Policy
forbids loading anything else. It can be read with the keyboard alone: a "skip to the report" link, a
table of contents of the numbered sections, headings with anchors, focusable figures and scrollable
tables, and a visible focus ring. The overall verdict stands in a box at the top.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from pathlib import Path

from reportlab.platypus import Flowable

from sitecal._io import write_bytes_atomic

from ._context import verdict_text
from ._html_story import Heading, HtmlStory, story_html

__all__ = ["CONTENT_SECURITY_POLICY", "html_document", "write_html"]

#: nothing is fetched: images only from data: URIs, styles only inline, no script, no form, no base
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
)

_CSS = """
:root { color-scheme: light; }
body { font: 16px/1.5 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif; color: #1a1a1a;
  margin: 0; background: #fff; }
.layout { display: flex; flex-wrap: wrap; gap: 0 2rem; max-width: 78rem; margin: 0 auto; padding: 1rem; }
nav.toc { flex: 0 1 17rem; font-size: 0.9rem; }
nav.toc ol { list-style: none; padding-left: 0.9rem; margin: 0.2rem 0; }
nav.toc > ol { padding-left: 0; }
main { flex: 1 1 40rem; min-width: 0; }
@media (min-width: 60rem) { nav.toc { position: sticky; top: 0; align-self: flex-start;
  max-height: 100vh; overflow-y: auto; } }
a { color: #0b4f9c; }
:focus-visible { outline: 3px solid #e08a00; outline-offset: 2px; }
.skip { position: absolute; left: -999rem; top: 0.5rem; background: #fff; padding: 0.5rem 1rem; z-index: 2; }
.skip:focus { left: 0.5rem; }
.verdict-box { border: 3px solid; border-radius: 6px; padding: 0.6rem 1rem; margin: 0 0 1.2rem; }
.verdict-box p { margin: 0.2rem 0; }
.verdict-box .word { font-size: 1.6rem; font-weight: 700; }
h1 { font-size: 1.8rem; margin: 0.4rem 0 0.8rem; }
h2 { font-size: 1.4rem; margin: 2rem 0 0.6rem; border-bottom: 1px solid #ccc; }
h3 { font-size: 1.15rem; margin: 1.4rem 0 0.5rem; }
h4 { font-size: 1rem; margin: 1rem 0 0.4rem; }
h2, h3 { scroll-margin-top: 0.5rem; }
p.note, p.caption, p.small { font-size: 0.9rem; color: #4d4d4d; }
p.kicker { font-weight: 700; color: #595959; margin-bottom: 0; }
.table { overflow-x: auto; margin: 0.4rem 0 1rem; }
table { border-collapse: collapse; font-size: 0.85rem; }
caption { text-align: left; font-weight: 400; padding: 0.3rem 0; }
th, td { border-bottom: 1px solid #ddd; padding: 0.25rem 0.5rem; vertical-align: top; text-align: left; }
thead th { background: #eef1f5; border-bottom: 2px solid #888; }
.num { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 1rem 0; }
figure img { max-width: 100%; height: auto; }
figcaption { font-size: 0.9rem; color: #4d4d4d; }
pre { font-size: 0.8rem; background: #f6f6f6; padding: 0.6rem; overflow-x: auto; white-space: pre-wrap; }
/* right-to-left text arrives in the order the PDF draws it (sitecal.report._text.display_order) */
p, li, td, th, h1, h2, h3, h4, figcaption, caption, pre { unicode-bidi: bidi-override; direction: ltr; }
"""


def html_document(
    story: Sequence[Flowable], *, title: str, verdict: object, draft: bool
) -> tuple[str, HtmlStory]:
    """The report's story as one HTML document.

    Parameters
    ----------
    story : sequence of Flowable
        The flowables of the PDF (:data:`sitecal.report.pdf.BUILDERS`), before layout.
    title : str
        The report's title (the page's ``<title>``), taken literally.
    verdict : object
        ``evaluation.json``'s overall verdict, printed in the box at the top as the PDF words it.
    draft : bool
        Whether the report is a draft (the protocol lacks a governance statement): said in the box.

    Returns
    -------
    (str, HtmlStory)
        The document, and the translated story (its headings and figures).
    """
    translated = story_html(story)
    word, ink, background = verdict_text(verdict)
    criteria = next((h for h in translated.headings if h.text.endswith("Acceptance criteria")), None)
    see = (
        f'<p><a href="#{criteria.anchor}">Acceptance criteria</a> gives each criterion.</p>'
        if criteria
        else ""
    )
    status = (
        "<p><b>DRAFT.</b> The protocol lacks statements only the site can make; not valid until given and "
        "signed.</p>"
        if draft
        else ""
    )
    box = (
        f'<div class="verdict-box" role="status" aria-labelledby="verdict-word" style="border-color:#'
        f'{ink.hexval()[2:]};background:#{background.hexval()[2:]}">'
        f'<p>Overall verdict: <span class="word" id="verdict-word">{escape(word)}</span></p>'
        f"{see}{status}</div>\n"
    )
    page = (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="generator" content="sitecal">\n'
        f"<title>{escape(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        '<a class="skip" href="#report">Skip to the report</a>\n<div class="layout">\n'
        f"{_contents(translated.headings)}"
        f'<main id="report" tabindex="-1">\n{box}{translated.body}</main>\n</div>\n</body>\n</html>\n'
    )
    return page, translated


def write_html(story: Sequence[Flowable], path: Path, *, title: str, verdict: object, draft: bool) -> Path:
    """Write :func:`html_document` to ``path`` atomically (UTF-8); return ``path``."""
    page, _ = html_document(story, title=title, verdict=verdict, draft=draft)
    write_bytes_atomic(Path(path), page.encode("utf-8"))
    return Path(path)


def _contents(headings: Sequence[Heading]) -> str:
    """The numbered sections as a nested list of links, in a ``<nav>``."""
    html = ['<nav class="toc" aria-label="Contents">\n<p><b>Contents</b></p>\n<ol>\n']
    open_sub = False
    for i, heading in enumerate(headings):
        link = f'<a href="#{heading.anchor}">{escape(heading.text)}</a>'
        if heading.level > 0:
            if not open_sub:
                html.append("\n<ol>\n" if i else "<li>\n<ol>\n")
                open_sub = True
            html.append(f"<li>{link}</li>\n")
            continue
        if open_sub:
            html.append("</ol>\n")
            open_sub = False
        html.append(("</li>\n" if i else "") + f"<li>{link}")
    html.append(("</ol>\n" if open_sub else "") + ("</li>\n" if headings else "") + "</ol>\n</nav>\n")
    return "".join(html)
