"""State shared by the section builders: inputs, styles, page width, numbering of tables and figures."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reportlab.lib import colors
from reportlab.platypus import CondPageBreak, Flowable, Paragraph, Spacer

from sitecal.metrics.registry import METRICS

from ._inputs import ReportInputs, get
from ._same_groups import Twin, same_groups
from ._styles import Palette, Styles
from ._text import NOT_RECORDED, para_text, words

__all__ = ["METRIC_NAMES", "Context", "interval_level", "verdict_text"]

#: The deployed calibration of another method than temperature scaling, as a noun (calibration.method).
_METHOD_NOUNS = {
    "vector": "vector scaling fit",
    "matrix": "matrix scaling fit",
    "dirichlet": "Dirichlet calibration fit",
    "histogram": "histogram binning fit",
    "isotonic": "isotonic regression fit",
    "beta": "beta calibration fit",
}

#: The printed label of each metric of the registry, by name.
METRIC_NAMES = {m.name: m.label for m in METRICS}
_HIGHER_IS_BETTER = frozenset(m.name for m in METRICS if m.direction == "higher")

_VERDICTS: dict[str, tuple[str, colors.Color, colors.Color]] = {
    "pass": ("Pass", Palette.passed, Palette.passed_bg),
    "fail": ("Fail", Palette.failed, Palette.failed_bg),
    "inconclusive": ("Inconclusive", Palette.inconclusive, Palette.inconclusive_bg),
    "insufficient data": ("Insufficient data", Palette.unjudged, Palette.unjudged_bg),
    # a monitoring report's verdicts (sitecal monitor)
    "alarm": ("Alarm", Palette.failed, Palette.failed_bg),
    "no alarm": ("No alarm", Palette.passed, Palette.passed_bg),
}


def interval_level(value: object) -> float | None:
    """``value`` as an interval level (a number in (0, 1), not a bool), else None."""
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < 1:
        return float(value)
    return None


def verdict_text(verdict: object) -> tuple[str, colors.Color, colors.Color]:
    """Return the printed word, its colour and a light background for a verdict string."""
    key = str(verdict).strip().lower().replace("_", " ")
    if key in _VERDICTS:
        return _VERDICTS[key]
    return words(verdict).capitalize(), Palette.unjudged, Palette.unjudged_bg


_LONG_TABLE = 20
_ROOM_FOR_START = 110  # points: the title and the first rows of a long table


@dataclass
class Context:
    """What every section builder needs; numbering advances as sections are built in order."""

    inputs: ReportInputs
    styles: Styles
    width: float
    figures_dir: Path
    figures: list[Path] = field(default_factory=list)
    section: int = 0
    subsection: int = 0
    table_no: int = 0
    figure_no: int = 0
    #: numbers of the headings built so far, for cross-references: {"Results": "5", "Results/Overall": "5.1"}
    headings: dict[str, str] = field(default_factory=dict)
    chapter: str = ""
    _twins: dict[tuple[str, str], Twin] | None = field(default=None, repr=False)

    @property
    def evaluation(self) -> Mapping[str, Any]:
        return self.inputs.evaluation

    @property
    def calibration(self) -> Mapping[str, Any]:
        return self.inputs.calibration

    def fitted(self, *, plural: bool = False) -> str:
        """What the calibration fits, in words: ``temperature(s)``, or e.g. ``isotonic regression fit(s)``."""
        method = str(self.calibration.get("method", "temperature"))
        if method == "temperature":
            return "temperatures" if plural else "temperature"
        noun = _METHOD_NOUNS.get(method, f"{method} fit")
        return f"{noun}s" if plural else noun

    @property
    def provenance(self) -> Mapping[str, Any]:
        return self.inputs.provenance

    @property
    def protocol(self) -> Mapping[str, Any]:
        return self.inputs.protocol

    # -- headings (the document template turns `outline` into PDF bookmarks) --
    def h1(self, text: str) -> Paragraph:
        self.section += 1
        self.subsection = 0
        self.chapter = text
        self.headings.setdefault(text, str(self.section))
        return self._heading(
            f"{self.section}&nbsp;&nbsp;{para_text(text)}", f"{self.section}  {text}", 0, self.styles.h1
        )

    def h2(self, text: str) -> Paragraph:
        self.subsection += 1
        number = f"{self.section}.{self.subsection}"
        self.headings.setdefault(f"{self.chapter}/{text}", number)
        return self._heading(f"{number}&nbsp;&nbsp;{para_text(text)}", f"{number}  {text}", 1, self.styles.h2)

    def h3(self, text: str) -> Paragraph:
        return Paragraph(para_text(text), self.styles.h3)

    def _heading(self, markup: str, plain: str, level: int, style: Any) -> Paragraph:
        heading = Paragraph(markup, style)
        heading.outline = (level, plain)
        return heading

    def next_table(self) -> str:
        self.table_no += 1
        return f"Table {self.table_no}"

    def next_figure(self) -> str:
        self.figure_no += 1
        return f"Figure {self.figure_no}"

    # -- paragraphs --
    def p(self, markup: str, style: Any = None) -> Paragraph:
        """Make a paragraph of markup the caller built (external text in it already escaped)."""
        return Paragraph(markup, style or self.styles.body)

    def cell(self, value: object, *, style: Any = None, missing: str = NOT_RECORDED) -> Paragraph:
        """Make a table cell holding ``value`` as literal text."""
        return Paragraph(para_text(value, missing=missing), style or self.styles.cell)

    def head(self, text: str, *, right: bool = False) -> Paragraph:
        return Paragraph(para_text(text), self.styles.cell_head_num if right else self.styles.cell_head)

    def table_block(self, title: str, body: Flowable, *, legend: Sequence[str] = ()) -> list[Flowable]:
        """Return a numbered table title (markup) kept with its table, its legend lines, then space below.

        A long table (more than :data:`_LONG_TABLE` rows) is not kept whole with its title, which would
        push it to the next page and leave this one blank: it starts where it is, split with its header
        repeated, provided there is room for the title and a few rows (else a page break first).
        ``legend``: lines of plain text printed under the table (the marks its cells use).
        """
        label = self.next_table()
        caption = f"<b>{label}.</b> {title}"
        notes = [Paragraph(para_text(line), self.styles.note) for line in legend]
        if getattr(body, "_nrows", 0) > _LONG_TABLE:
            loose = self.styles.table_title.clone("table_title_loose", keepWithNext=0)
            return [CondPageBreak(_ROOM_FOR_START), Paragraph(caption, loose), body, *notes, Spacer(1, 9)]
        return [Paragraph(caption, self.styles.table_title), body, *notes, Spacer(1, 9)]

    def verdict_cell(self, verdict: object, *, size: float | None = None) -> Paragraph:
        word, ink, _ = verdict_text(verdict)
        font = f' size="{size}"' if size else ""
        return Paragraph(
            f'<font color="{ink.hexval()}"{font}><b>{para_text(word)}</b></font>', self.styles.cell
        )

    # -- vocabulary from the dicts --
    def attribute_label(self, attribute: object) -> str:
        if attribute == "overall":
            return "All studies"
        label = get(self.evaluation, "attribute_labels", str(attribute))
        return str(label) if label else words(attribute).capitalize()

    @staticmethod
    def metric_name(metric: object) -> str:
        return METRIC_NAMES.get(str(metric), words(metric))

    @staticmethod
    def lower_is_better(metric: object) -> bool:
        return str(metric) not in _HIGHER_IS_BETTER

    def twin(self, attribute: object, group: object) -> Twin | None:
        """The earlier group that holds the same studies as this one (:mod:`._same_groups`), or None."""
        if self._twins is None:
            self._twins = same_groups(self.evaluation)
        return self._twins.get((str(attribute), str(group)))

    def twin_text(self, twin: Twin) -> str:
        """``same 585 studies as Scanner: DRX Demo`` (markup; names escaped)."""
        where = (
            "all studies"
            if twin.attribute == "overall"
            else f"{para_text(self.attribute_label(twin.attribute))}: {para_text(twin.group, max_chars=40)}"
        )
        count = f"{twin.n:,} " if isinstance(twin.n, int) else ""
        basis = " (identical sizes, reliability curves and estimates)" if twin.basis == "statistics" else ""
        return f"same {count}studies as {where}{basis}"

    def level(self) -> float | None:
        """The evaluation's interval level, or None where not recorded as a share in (0, 1)."""
        return interval_level(get(self.evaluation, "bootstrap", "level"))

    def level_text(self) -> str:
        level = self.level()
        return "confidence" if level is None else f"{level * 100:g}%"

    def min_group_size(self) -> object:
        return get(self.evaluation, "min_group_size")
