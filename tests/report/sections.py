"""Render one report section builder on its own into a PDF and return its text (pdftotext)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pypdf
from reportlab.lib.pagesizes import A4
from reportlab.platypus import Flowable, SimpleDocTemplate

from sitecal.report._context import Context
from sitecal.report._inputs import ReportInputs
from sitecal.report._styles import make_styles, register_fonts


def render_section(
    folder: Path,
    builder: Callable[[Context], list[Flowable]],
    evaluation: Mapping[str, Any],
    *,
    protocol: Mapping[str, Any] | None = None,
    provenance: Mapping[str, Any] | None = None,
) -> str:
    """Build ``builder``'s flowables from ``evaluation`` into ``folder/section.pdf``; its text in drawing
    order (pypdf: table cells row by row)."""
    styles = make_styles(register_fonts())
    inputs = ReportInputs(dict(evaluation), {}, dict(provenance or {}), dict(protocol or {"name": "t"}))
    pdf = folder / "section.pdf"
    # one tall page: a table split across pages would interleave cells in the extracted text
    doc = SimpleDocTemplate(str(pdf), pagesize=(A4[0], 4 * A4[1]), leftMargin=50, rightMargin=50)
    ctx = Context(inputs=inputs, styles=styles, width=doc.width, figures_dir=folder / "figures")
    doc.build(builder(ctx))
    return "\n".join(page.extract_text() for page in pypdf.PdfReader(pdf).pages)
