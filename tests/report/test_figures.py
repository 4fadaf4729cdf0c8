"""Figures: drawn from the stored curves, at 200 dpi, without pyplot, with clear errors."""

from __future__ import annotations

import ast
import struct
import sys
from pathlib import Path
from typing import Any

import pytest

from sitecal.errors import DataError
from sitecal.report import ReportArtifacts
from sitecal.report.figures import forest_figure, reliability_figure, save_png

REPORT_SRC = Path(__file__).parents[2] / "src" / "sitecal" / "report"


def png_dpi(path: Path) -> tuple[float, float]:
    """Read the pHYs chunk of a PNG (pixels per metre) and convert it to dots per inch."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos = 8
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        if kind == b"pHYs":
            x, y, unit = struct.unpack(">IIB", data[pos + 8 : pos + 17])
            assert unit == 1  # metre
            return x * 0.0254, y * 0.0254
        pos += 12 + length
    raise AssertionError(f"{path} has no pHYs chunk")


def test_report_figures_exist_and_are_at_least_200_dpi(report: ReportArtifacts) -> None:
    names = [p.name for p in report.figures]
    # the flow diagram, a forest plot per judged metric (ECE and NLL criteria), the overall diagram and one
    # per scanner (the calibration attribute)
    assert names[:4] == ["flow.png", "forest_ece.png", "forest_nll.png", "reliability_overall.png"]
    assert len([n for n in names if n.startswith("reliability_scanner_")]) == 5
    for path in report.figures:
        assert path.is_file() and path.parent == report.pdf.parent / "figures"
        dpi_x, dpi_y = png_dpi(path)
        assert dpi_x >= 199.5 and dpi_y >= 199.5  # 200 dpi is stored as 7874 px/m = 199.9996 dpi


def test_every_figure_has_a_reproducible_svg_beside_it(
    report: ReportArtifacts, raw: dict[str, Any], tmp_path: Path
) -> None:
    import xml.etree.ElementTree as ET

    for path in report.figures:
        svg = path.with_suffix(".svg")
        root = ET.fromstring(svg.read_bytes())
        assert root.tag.endswith("svg") and root.iter()  # well-formed XML
        assert b"<dc:date>" not in svg.read_bytes()
    fig = forest_figure(raw["evaluation"], width_in=6.0)
    save_png(fig, tmp_path / "a.png")
    save_png(fig, tmp_path / "b.png")
    assert (tmp_path / "a.svg").read_bytes() == (tmp_path / "b.svg").read_bytes()


def test_reliability_figure_draws_empty_bins_as_gaps(raw: dict[str, Any], tmp_path: Path) -> None:
    group = raw["evaluation"]["subgroups"]["scanner"][0]
    fig = reliability_figure(group, title="Scanner: $x$ <b>")
    top_before = fig.axes[0]
    counts = group["reliability"]["before"]["count"]
    # one bar per non-empty bin, nothing where a bin is empty
    assert len(top_before.patches) == sum(1 for c in counts if c > 0)
    heights = sorted(round(p.get_height(), 4) for p in top_before.patches)
    stored = sorted(
        a for a, c in zip(group["reliability"]["before"]["accuracy"], counts, strict=True) if c > 0
    )
    assert heights == stored  # the bars are the stored accuracies, not recomputed
    out = save_png(fig, tmp_path / "r.png")
    assert png_dpi(out)[0] >= 199.5


def test_reliability_figure_rejects_inconsistent_bins(raw: dict[str, Any]) -> None:
    group = dict(raw["evaluation"]["subgroups"]["scanner"][0])
    curve = dict(group["reliability"]["before"])
    curve["count"] = curve["count"][:-1]
    group["reliability"] = {"before": curve, "after": group["reliability"]["after"]}
    with pytest.raises(DataError, match=r"'subgroups\.scanner\[0\]\.reliability\.before' has 16 bin edges"):
        reliability_figure(group, title="t", path="subgroups.scanner[0]")


def test_forest_figure_has_a_row_per_group_and_the_thresholds(raw: dict[str, Any]) -> None:
    ev = raw["evaluation"]
    fig = forest_figure(ev)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    n_groups = 1 + sum(len(g) for g in ev["subgroups"].values())
    assert len(labels) == n_groups + 1 + len(ev["subgroups"])  # plus one heading row per block
    assert "Fujifilm FDR Go PLUS  (n = 28) *" in labels  # small group marked
    # each ECE criterion's margin is drawn across the rows of its own scope only; the NLL one draws none
    ticks = {t.get_text(): t.get_position()[1] for t in ax.get_yticklabels()}
    margins = {}
    for collection in ax.collections:
        for segment in collection.get_segments():
            (x0, y0), (x1, y1) = segment
            assert x0 == x1
            margins[x0] = (min(y0, y1), max(y0, y1))
    assert sorted(margins) == [0.08, 0.12]
    overall_y = ticks[next(t for t in ticks if t.startswith("All studies"))]
    scanner_ys = [ticks[t] for t in ticks if t.startswith("Fujifilm") or t.startswith("GE Definium")]
    low, high = margins[0.08]
    assert low < overall_y < high and not any(low < y < high for y in scanner_ys)
    low, high = margins[0.12]
    assert all(low < y < high for y in scanner_ys) and not low < overall_y < high


def test_report_layer_imports_only_what_the_layer_rule_allows() -> None:
    # python-bidi and arabic-reshaper put right-to-left text in display order (_text.py)
    allowed_third_party = {"numpy", "matplotlib", "reportlab", "bidi", "arabic_reshaper"}
    for path in sorted(REPORT_SRC.glob("*.py")):
        # report.dcm is written with pydicom (DESIGN.md: the report stage wraps the PDF as DICOM); the
        # report still never reads a DICOM input
        allowed = allowed_third_party | {"dicom_pdf.py": {"pydicom"}, "schema.py": {"jsonschema"}}.get(
            path.name, set()
        )
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                assert "pyplot" not in name, f"{path.name} imports pyplot"
                if top != "sitecal":  # sitecal imports: tests/test_architecture.py
                    assert top in allowed or top in sys.stdlib_module_names, f"{path.name}: {name}"
