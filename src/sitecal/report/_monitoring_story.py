"""The monitoring report's story: the flowables of ``monitoring.pdf`` and ``monitoring.html``.

Sections, in order: the title block (protocol, baseline, windows, alpha and horizon, the verdict), the
alerts (alarms, then the label-free warnings in words), the trends (per group, one figure per metric and
one of the tests' evidence), the methods, and every window of every group. Every number is read from the
:class:`~sitecal.results.MonitoringDocument`; text from the protocol or the data (group and attribute
names, criterion ids, folder names) reaches the page only through :func:`._text.para_text` and
:func:`._text.plot_text`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reportlab.lib.units import inch
from reportlab.platypus import CondPageBreak, Flowable, Image, KeepTogether, Paragraph, Spacer

from sitecal.results import MonitoringDocument, MonitorWindow

from . import _monitoring_words as words
from ._monitoring_figures import AlarmMark, EvidenceSeries, evidence_figure, trend_figure, window_axis
from ._styles import Palette, Styles, table
from ._text import format_count, format_value, name_text, para_text, short_sha
from .figures import save_png

__all__ = ["MAX_GROUPS", "MAX_METRICS", "MAX_TABLE_ROWS", "MonitoringStory", "build_story", "shown_groups"]

#: Groups drawn at most (overall, then alarmed groups, then tested groups, then the rest).
MAX_GROUPS = 24
#: Metric figures per group at most (the three window metrics and the fitted temperature).
MAX_METRICS = 4
#: Rows of the alerts and windows tables at most; the rest are counted, not printed.
MAX_TABLE_ROWS = 1500
_LONG_TABLE = 20
_ROOM_FOR_START = 110


@dataclass
class MonitoringStory:
    """The story under construction: styles, page width, numbering, and the figures written."""

    styles: Styles
    width: float
    figures_dir: Path
    figures: list[Path] = field(default_factory=list)
    section: int = 0
    subsection: int = 0
    table_no: int = 0
    figure_no: int = 0

    def h1(self, text: str) -> Paragraph:
        self.section += 1
        self.subsection = 0
        return self._heading(f"{self.section}", text, 0, self.styles.h1)

    def h2(self, text: str) -> Paragraph:
        self.subsection += 1
        return self._heading(f"{self.section}.{self.subsection}", text, 1, self.styles.h2)

    @staticmethod
    def _heading(number: str, text: str, level: int, style: Any) -> Paragraph:
        heading = Paragraph(f"{number}&nbsp;&nbsp;{para_text(text)}", style)
        heading.outline = (level, f"{number}  {text}")  # a PDF bookmark, and the HTML view's contents
        return heading

    def p(self, markup: str, style: Any = None) -> Paragraph:
        """A paragraph of markup the caller built (outside text in it already escaped)."""
        return Paragraph(markup, style or self.styles.body)

    def cell(self, markup: str, *, right: bool = False) -> Paragraph:
        return Paragraph(markup, self.styles.cell_num if right else self.styles.cell)

    def head(self, text: str, *, right: bool = False) -> Paragraph:
        return Paragraph(para_text(text), self.styles.cell_head_num if right else self.styles.cell_head)

    def table_block(self, title: str, rows: list[list[Any]], widths: Sequence[float]) -> list[Flowable]:
        """A numbered table title (markup) with its table; a long table starts where it is, split."""
        self.table_no += 1
        caption = f"<b>Table {self.table_no}.</b> {title}"
        body = table(rows, [w * self.width for w in widths])
        if len(rows) > _LONG_TABLE:
            loose = self.styles.table_title.clone("table_title_loose", keepWithNext=0)
            return [CondPageBreak(_ROOM_FOR_START), Paragraph(caption, loose), body, Spacer(1, 9)]
        return [Paragraph(caption, self.styles.table_title), body, Spacer(1, 9)]

    def figure(self, fig: Any, name: str, caption: str) -> list[Flowable]:
        """Save ``fig`` under ``figures/`` and place it at its printed size with its numbered caption."""
        path = save_png(fig, self.figures_dir / name)
        self.figures.append(path)
        width_in, height_in = fig.get_size_inches()
        image = Image(str(path), width=width_in * inch, height=height_in * inch)
        return [KeepTogether([image, self.p(caption, self.styles.caption)])]


Group = tuple[str, str]


def _group_markup(attribute: str, group: str) -> str:
    return "All studies" if attribute == "overall" else f"{para_text(attribute)}: {name_text(group)}"


def shown_groups(document: MonitoringDocument) -> tuple[list[Group], list[Group]]:
    """The groups drawn (at most :data:`MAX_GROUPS`) and those left out, in the order they are listed.

    Overall first, then the groups with an alarm, then those with a test, then the others, each in the
    order they first appear in the document.
    """
    order: list[Group] = []
    for w in document.windows:
        if (w.attribute, w.group) not in order:
            order.append((w.attribute, w.group))
    alarmed = {(a.attribute, a.group) for a in document.alerts if a.kind == "alarm"}
    tested = {(t.attribute, t.group) for t in document.tests}

    def tier(key: Group) -> int:
        return 0 if key[0] == "overall" else 1 if key in alarmed else 2 if key in tested else 3

    ranked = sorted(order, key=tier)  # stable: document order within a tier
    return ranked[:MAX_GROUPS], ranked[MAX_GROUPS:]


def _metrics_of(windows: Sequence[MonitorWindow]) -> list[str]:
    """The metrics some window of the group holds: the known ones in order, then others by name."""
    names = {name for w in windows for name in (w.metrics or {})}
    ordered = [m for m in words.METRIC_ORDER if m in names] + sorted(names - set(words.METRIC_ORDER))
    if any(w.temperature is not None for w in windows):
        ordered.append(words.TEMPERATURE)
    return ordered


# -- sections --


def title_block(s: MonitoringStory, document: MonitoringDocument, axis: Sequence[str]) -> list[Flowable]:
    alarm = document.verdict == "alarm"
    ink, background = (Palette.failed, Palette.failed_bg) if alarm else (Palette.passed, Palette.passed_bg)
    word = "ALARM" if alarm else "No alarm"
    verdict = table(
        [
            [
                Paragraph(
                    f'<font color="{ink.hexval()}" size="17"><b>{word}</b></font>',
                    s.styles.cell.clone("verdict", leading=22),
                ),
                s.p(words.verdict_sentence(document, axis), s.styles.small),
            ]
        ],
        [0.26 * s.width, 0.74 * s.width],
        header=False,
        extra=[("BACKGROUND", (0, 0), (-1, -1), background), ("VALIGN", (0, 0), (-1, -1), "MIDDLE")],
    )
    b = document.baseline
    facts = [
        ("Document ID", f"{para_text(document.document_id)} (made {para_text(document.created_utc)})"),
        ("Protocol", f"{para_text(document.protocol.name)} (sha256 {short_sha(document.protocol.sha256)})"),
        ("Baseline run folder", para_text(b.run_folder)),
        ("Baseline document ID", para_text(b.document_id or None)),
        ("Deployed calibration", words.calibration_text(b)),
        ("Windows", words.windows_text(document, axis)),
        ("Alpha and horizon", words.alpha_text(document)),
        ("Left out", words.excluded_text(document.excluded)),
    ]
    rows = [[s.cell(f"<b>{k}</b>"), s.cell(v)] for k, v in facts]
    return [
        s.p("Calibration monitoring after go-live", s.styles.kicker),
        s.p(f"Trend report: protocol {para_text(document.protocol.name)}", s.styles.title),
        verdict,
        Spacer(1, 8),
        table(rows, [0.26 * s.width, 0.74 * s.width], header=False),
        Spacer(1, 6),
        s.p(words.READING, s.styles.small),
    ]


def _alarm_rows(s: MonitoringStory, document: MonitoringDocument) -> list[list[Any]]:
    tests = {t.id: t for t in document.tests}
    rows: list[list[Any]] = [
        [s.head("Window"), s.head("Group"), s.head("Test"), s.head("Evidence (log e-value)", right=True)]
    ]
    for alert in (a for a in document.alerts if a.kind == "alarm"):
        test = tests.get(alert.test or "")
        rows.append(
            [
                s.cell(para_text(alert.window)),
                s.cell(_group_markup(alert.attribute, alert.group)),
                s.cell(words.test_text(test) if test else para_text(alert.test)),
                s.cell(
                    f"{format_value(alert.value, digits=2)} ≥ threshold "
                    f"{format_value(alert.reference, digits=2)}",
                    right=True,
                ),
            ]
        )
    return rows


def alerts_section(s: MonitoringStory, document: MonitoringDocument) -> list[Flowable]:
    out: list[Flowable] = [s.h1("Alerts"), s.h2("Alarms")]
    alarms = [a for a in document.alerts if a.kind == "alarm"]
    if alarms:
        out += [s.p(words.ALARMS_LEAD)]
        out += s.table_block(
            "Alarms: each test whose evidence reached its threshold, at the first window it did.",
            _alarm_rows(s, document)[: MAX_TABLE_ROWS + 1],
            (0.12, 0.22, 0.44, 0.22),
        )
    else:
        out.append(s.p(words.NO_ALARM))
    warnings = [a for a in document.alerts if a.kind != "alarm"]
    out.append(s.h2("Warnings without labels"))
    if not warnings:
        return [*out, s.p(words.NO_WARNING)]
    out.append(s.p(words.WARNINGS_LEAD))
    rows: list[list[Any]] = [[s.head("Window"), s.head("Group"), s.head("Warning")]]
    rows += [
        [
            s.cell(para_text(a.window)),
            s.cell(_group_markup(a.attribute, a.group)),
            s.cell(words.warning_text(a)),
        ]
        for a in warnings[:MAX_TABLE_ROWS]
    ]
    out += s.table_block("Label-free warnings, in window order.", rows, (0.12, 0.22, 0.66))
    if len(warnings) > MAX_TABLE_ROWS:
        out.append(s.p(words.rows_left_out(len(warnings) - MAX_TABLE_ROWS, "warnings"), s.styles.note))
    return out


def _group_figures(
    s: MonitoringStory,
    document: MonitoringDocument,
    key: Group,
    axis: Sequence[str],
    number: int,
) -> list[Flowable]:
    attribute, group = key
    windows = [w for w in document.windows if (w.attribute, w.group) == key]
    at = {w.window: w for w in windows}
    tests = [t for t in document.tests if (t.attribute, t.group) == key]
    marks = [
        AlarmMark(a.window, words.short_test(t))
        for a in document.alerts
        if a.kind == "alarm" and (a.attribute, a.group) == key
        for t in tests
        if t.id == a.test
    ]
    metrics = _metrics_of(windows)
    drawn = metrics[:MAX_METRICS]
    label = words.group_name(attribute, group)
    evidence_no = s.figure_no + len(drawn) + 1 if tests else None
    lead: list[Flowable] = [s.h2(label), s.p(words.group_lead(windows, tests, marks), s.styles.small)]
    out: list[Flowable] = []
    for metric in drawn:
        points = [
            None
            if w is None
            else (w.temperature if metric == words.TEMPERATURE else (w.metrics or {}).get(metric))
            for w in (at.get(x) for x in axis)
        ]
        margins = [t.margin for t in tests if t.kind == words.TEST_KIND.get(metric)]
        fig = trend_figure(
            axis,
            points,
            title=f"{words.metric_label(metric)}: {label}",
            ylabel=words.metric_axis(metric),
            margins=margins,
            reference=words.REFERENCE.get(metric),
            alarms=marks,
        )
        s.figure_no += 1
        caption = f"<b>Figure {s.figure_no}.</b> " + words.trend_caption(metric, key, margins, evidence_no)
        out += s.figure(fig, f"monitor_g{number:02d}_{metric}.png", caption)
    if len(metrics) > len(drawn):
        left = ", ".join(para_text(words.metric_label(m)) for m in metrics[len(drawn) :])
        out.append(s.p(f"Not drawn here (at most {MAX_METRICS} metrics a group): {left}.", s.styles.note))
    if not metrics:
        out.append(s.p(words.NO_METRICS, s.styles.note))
    if tests:
        series = [
            EvidenceSeries(
                label=words.short_test(t, criterion=True),
                values=tuple(None if (w := at.get(x)) is None else w.evidence.get(t.id) for x in axis),
                threshold=t.threshold,
            )
            for t in tests
        ]
        fig = evidence_figure(axis, series, title=f"Evidence of the tests: {label}", alarms=marks)
        s.figure_no += 1
        caption = f"<b>Figure {s.figure_no}.</b> " + words.evidence_caption(tests)
        out += s.figure(fig, f"monitor_g{number:02d}_evidence.png", caption)
    # the heading stays with the group's first figure (or note) rather than end a page alone
    return [KeepTogether([*lead, *out[:1]]), *out[1:]]


def trends_section(s: MonitoringStory, document: MonitoringDocument, axis: Sequence[str]) -> list[Flowable]:
    shown, left_out = shown_groups(document)
    out: list[Flowable] = [s.h1("Trends, group by group"), s.p(words.TRENDS_LEAD)]
    if left_out:
        names = ", ".join(_group_markup(*k) for k in left_out[:50])
        more = f" and {len(left_out) - 50:,} more" if len(left_out) > 50 else ""
        out.append(
            s.p(
                f"<b>Not drawn:</b> {len(left_out):,} groups beyond the first {MAX_GROUPS} (overall, "
                f"alarmed, tested, then the rest): {names}{more}. Their windows are in the table of windows "
                "(within its bound) and in monitoring.json.",
                s.styles.note,
            )
        )
    for number, key in enumerate(shown, start=1):
        out += _group_figures(s, document, key, axis, number)
    if not shown:
        out.append(s.p("No window holds a study: there is nothing to draw.", s.styles.note))
    return out


def methods_section(s: MonitoringStory, document: MonitoringDocument) -> list[Flowable]:
    out: list[Flowable] = [s.h1("Methods")]
    out += [s.p(markup) for markup in words.methods_paragraphs(document)]
    return out


def windows_section(s: MonitoringStory, document: MonitoringDocument) -> list[Flowable]:
    out: list[Flowable] = [s.h1("Every window and group")]
    rows: list[list[Any]] = [
        [
            s.head("Window"),
            s.head("Group"),
            s.head("Studies", right=True),
            s.head("Patients", right=True),
            s.head("Labelled", right=True),
            s.head("Mean confidence", right=True),
            s.head("Note"),
        ]
    ]
    for w in document.windows[:MAX_TABLE_ROWS]:
        rows.append(
            [
                s.cell(para_text(w.window)),
                s.cell(_group_markup(w.attribute, w.group)),
                s.cell(format_count(w.n_studies), right=True),
                s.cell(format_count(w.n_patients), right=True),
                s.cell(format_count(w.n_labelled), right=True),
                s.cell(format_value(w.mean_confidence), right=True),
                s.cell(words.window_note(w)),
            ]
        )
    out += s.table_block(
        "Every window of every group: studies, distinct patients, studies with a label, and the mean "
        "confidence after the deployed calibration (the accuracy the model expects of itself).",
        rows,
        (0.11, 0.27, 0.1, 0.1, 0.1, 0.12, 0.2),
    )
    if len(document.windows) > MAX_TABLE_ROWS:
        n = len(document.windows) - MAX_TABLE_ROWS
        out.append(s.p(words.rows_left_out(n, "windows"), s.styles.note))
    return out


def build_story(s: MonitoringStory, document: MonitoringDocument) -> list[Flowable]:
    """Every section of the monitoring report, in order."""
    axis = window_axis((w.window for w in document.windows), document.window_kind)
    return [
        *title_block(s, document, axis),
        *alerts_section(s, document),
        *trends_section(s, document, axis),
        *methods_section(s, document),
        *windows_section(s, document),
    ]
