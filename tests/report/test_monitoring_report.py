"""monitoring.pdf and monitoring.html: the alerts first, one trend figure per group and metric, hostile names.

The document is built by hand, so that every alert kind, a calendar window without any study, a group
without tests and a group named like markup are present at once, and the figures it implies can be
counted from it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path

import pytest

from sitecal.report import MonitoringArtifacts, render_monitoring
from sitecal.report import _monitoring_story as story_module
from sitecal.report._monitoring_figures import window_axis
from sitecal.report.html import CONTENT_SECURITY_POLICY
from sitecal.results import (
    Interval,
    MonitorAlert,
    MonitorBaseline,
    MonitoringDocument,
    MonitorTest,
    MonitorWindow,
    ProtocolRef,
)

HOSTILE = '<script>alert(1)</script><font color="red">X</font>'
THRESHOLD = 4.0  # log(n tests / alpha) is not recomputed by the report: any positive value will do
WINDOWS = ("2027-01", "2027-02", "2027-04")  # 2027-03 holds no study at all: a gap on every axis


def _interval(estimate: float, spread: float = 0.03) -> Interval:
    return Interval(estimate=estimate, low=estimate - spread, high=estimate + spread)


def _tests(attribute: str, group: str) -> list[MonitorTest]:
    specs = [
        ("ece", "gap", "above", 0.1),
        ("ece", "gap", "below", -0.1),
        ("slope", "temperature", "above", 1.25),
        ("slope", "temperature", "below", 0.8),
        ("acc", "accuracy", "below", 0.7),
    ]
    return [
        MonitorTest(
            id=f"{criterion}/{attribute}/{group}/{kind}/{side}",
            kind=kind,  # type: ignore[arg-type]
            criterion=criterion,
            side=side,  # type: ignore[arg-type]
            margin=margin,
            attribute=attribute,
            group=group,
            threshold=THRESHOLD,
        )
        for criterion, kind, side, margin in specs
    ]


def _window(
    window: str,
    attribute: str,
    group: str,
    tests: list[MonitorTest],
    *,
    labelled: bool = True,
    evidence: float = 0.0,
    fallback: bool = False,
    metrics: tuple[str, ...] = ("calibration_gap", "ece", "accuracy"),
) -> MonitorWindow:
    values = {"calibration_gap": 0.02, "ece": 0.05, "accuracy": 0.8}
    return MonitorWindow(
        window=window,
        attribute=attribute,
        group=group,
        n_studies=120,
        n_patients=80,
        n_labelled=120 if labelled else 0,
        mean_confidence=0.66,
        fallback=fallback,
        metrics={m: _interval(values[m]) for m in metrics if m in values} if labelled else None,
        temperature=_interval(1.1, 0.1) if labelled and "temperature" in metrics else None,
        evidence={t.id: evidence for t in tests},
        alarms=tuple(t.id for t in tests if evidence >= t.threshold),
    )


def _document(groups: list[tuple[str, str]] | None = None) -> MonitoringDocument:
    """Overall and Alpha tested (Alpha's temperature test alarms at 2027-04); a hostile, untested group."""
    overall, alpha = _tests("overall", "All studies"), _tests("scanner", "Alpha")
    every = ("calibration_gap", "ece", "accuracy", "temperature")
    windows = []
    for i, w in enumerate(WINDOWS):
        windows.append(_window(w, "overall", "All studies", overall, metrics=every))
        windows.append(_window(w, "scanner", "Alpha", alpha, metrics=every, evidence=2.5 * i))
        if w != "2027-01":  # a new scanner from February: labels for its last window only, accuracy only
            windows.append(
                _window(
                    w, "scanner", HOSTILE, [], labelled=w == "2027-04", fallback=True, metrics=("accuracy",)
                )
            )
    for attribute, group in groups or []:
        windows.append(_window("2027-01", attribute, group, [], metrics=("accuracy",)))
    windows.sort(key=lambda w: (w.window, w.attribute, w.group))
    alarm_test = next(t for t in alpha if t.kind == "temperature" and t.side == "above")
    alerts = [
        MonitorAlert(
            kind="alarm",
            window="2027-04",
            attribute="scanner",
            group="Alpha",
            test=alarm_test.id,
            value=5.0,
            reference=THRESHOLD,
        ),
        MonitorAlert(kind="new_group", window="2027-02", attribute="scanner", group=HOSTILE),
        MonitorAlert(kind="unseen_group", window="2027-02", attribute="scanner", group=HOSTILE),
        MonitorAlert(
            kind="score_shift",
            window="2027-02",
            attribute="overall",
            group="All studies",
            value=0.234,
            reference=1.5e-6,
        ),
        MonitorAlert(
            kind="accuracy_estimate",
            window="2027-04",
            attribute="scanner",
            group="Alpha",
            value=0.66,
            reference=0.7,
        ),
    ]
    return MonitoringDocument(
        document_id="SC-FEDCBA987654",
        created_utc="2027-07-01T06:00:00Z",
        protocol=ProtocolRef(name="chest-monitor", sha256="ab" * 32),
        baseline=MonitorBaseline(
            run_folder="chest-20270101T000000Z",
            document_id="SC-0123456789AB",
            calibration_sha256="cd" * 32,
            per="scanner",
        ),
        window_kind="month",
        alpha=0.05,
        horizon=24,
        tests=(*overall, *alpha),
        windows=tuple(windows),
        alerts=tuple(alerts),
        excluded={},
        verdict="alarm",
    )


def _implied_figures(document: MonitoringDocument) -> int:
    """A figure per group and metric some window of it holds (temperature included), one per tested group."""
    groups = {(w.attribute, w.group) for w in document.windows}
    count = 0
    for key in groups:
        windows = [w for w in document.windows if (w.attribute, w.group) == key]
        metrics = {m for w in windows for m in (w.metrics or {})}
        metrics |= {"temperature"} if any(w.temperature for w in windows) else set()
        count += len(metrics) + any((t.attribute, t.group) == key for t in document.tests)
    return count


class _Page(HTMLParser):
    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> MonitoringArtifacts:
    return render_monitoring(_document(), tmp_path_factory.mktemp("monitoring") / "chest-20270501T000000Z")


def test_the_alerts_come_first_with_the_verdict_the_alarm_and_each_warning(
    rendered: MonitoringArtifacts, poppler_text: Callable[[Path], str]
) -> None:
    text = " ".join(poppler_text(rendered.pdf).split())
    assert "ALARM" in text and "SC-0123456789AB" in text and "chest-20270101T000000Z" in text
    alerts, trends = text.index("1 Alerts"), text.index("2 Trends, group by group")
    alarm_row = re.search(r"2027-04 scanner: Alpha criterion slope: temperature .*? above 1\.250", text)
    assert alarm_row is not None and alerts < alarm_row.start() < trends
    assert "5.00 ≥ threshold 4.00" in text
    warnings = text[alerts:trends]
    assert "a value not seen before: by the validation" in warnings
    assert "no temperature of its own: the global one was applied" in warnings.lower()
    assert "Kolmogorov-Smirnov statistic 0.234, p = 1.5e-06" in warnings
    assert "not corrected for repeated looks beyond Bonferroni over the windows shown" in warnings
    assert "mean confidence 0.660) is below the margin 0.700; blind to miscalibration" in warnings
    assert text.index("3 Methods") < text.index("4 Every window and group")
    # the calendar gap is said, and the per-window intervals are captioned as what they are
    assert "2027-01 to 2027-04: 4 windows, 1 of them without any study" in text
    assert "not adjusted for repeated looks; the alarms come from the anytime-valid evidence below" in text


def test_one_figure_per_group_and_metric_and_one_evidence_figure_per_tested_group(
    rendered: MonitoringArtifacts, poppler_text: Callable[[Path], str]
) -> None:
    document = _document()
    assert len(rendered.figures) == _implied_figures(document) == 11  # 5 + 5 + the new scanner's accuracy
    assert all(p.is_file() and p.parent == rendered.pdf.parent / "figures" for p in rendered.figures)
    assert sum("_evidence" in p.name for p in rendered.figures) == 2
    text = poppler_text(rendered.pdf)
    assert len(re.findall(r"Figure \d+\.", text)) == 11
    html = rendered.html.read_text(encoding="utf-8")
    assert html.count('<img src="data:image/png;base64,') == 11


def test_a_hostile_group_name_is_printed_as_text(
    rendered: MonitoringArtifacts, poppler_text: Callable[[Path], str]
) -> None:
    text = " ".join(poppler_text(rendered.pdf).split())
    assert "<script>alert(1)</script><font color=" in text  # literally: not taken as markup
    html = rendered.html.read_text(encoding="utf-8")
    page = _Page(html)
    assert not [tag for tag, _ in page.tags if tag in ("script", "font")]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&lt;font" in html
    assert HOSTILE in "".join(page.text)


def test_the_html_view_references_nothing_outside_itself(rendered: MonitoringArtifacts) -> None:
    page = _Page(rendered.html.read_text(encoding="utf-8"))
    assert (
        "meta",
        {"http-equiv": "Content-Security-Policy", "content": CONTENT_SECURITY_POLICY},
    ) in page.tags
    for tag, attrs in page.tags:
        assert tag not in ("script", "link", "iframe", "object", "embed", "base"), tag
        assert attrs.get("src", "data:image/png;base64,").startswith("data:image/png;base64,"), attrs
        assert attrs.get("href", "#").startswith("#"), attrs
        assert "url(" not in attrs.get("style", "")


def test_groups_beyond_the_bound_are_named_not_drawn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, poppler_text: Callable[[Path], str]
) -> None:
    monkeypatch.setattr(story_module, "MAX_GROUPS", 3)
    extra = [("site", f"Site {i}") for i in range(3)]
    document = _document(extra)
    artifacts = render_monitoring(document, tmp_path)
    # overall, Alpha (tested), then the untested groups in the order they first appear
    shown, left = story_module.shown_groups(document)
    assert shown == [("overall", "All studies"), ("scanner", "Alpha"), ("site", "Site 0")]
    assert left == [("site", "Site 1"), ("site", "Site 2"), ("scanner", HOSTILE)]
    assert len(artifacts.figures) == 5 + 5 + 1
    text = " ".join(poppler_text(artifacts.pdf).split())
    assert "Not drawn: 3 groups beyond the first 3" in text
    assert "site: Site 1, site: Site 2, scanner: <script>" in text


def test_a_bad_page_size_names_the_function(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"'page_size' parameter of render_monitoring .* Did you mean 'A4'"):
        render_monitoring(_document(), tmp_path, page_size="A5")


@pytest.mark.parametrize(
    ("labels", "kind", "axis"),
    [
        (["2027-03", "2027-01", "2027-03"], "month", ["2027-01", "2027-02", "2027-03"]),
        (["2026-12", "2027-01"], "month", ["2026-12", "2027-01"]),
        (["2026-Q4", "2027-Q2"], "quarter", ["2026-Q4", "2027-Q1", "2027-Q2"]),
        # 2026 has an ISO week 53 (1 January 2026 is a Thursday); 2027 does not
        (["2026-W52", "2027-W01"], "week", ["2026-W52", "2026-W53", "2027-W01"]),
        (["2027-W52", "2028-W01"], "week", ["2027-W52", "2028-W01"]),
        # labels that are not windows of the kind are kept as they are, sorted: nothing is invented
        (["2027-02", "<b>x</b>"], "month", ["2027-02", "<b>x</b>"]),
        (["2027-W54", "2027-W50"], "week", ["2027-W50", "2027-W54"]),
    ],
)
def test_the_axis_holds_every_calendar_window_between_the_first_and_the_last(
    labels: list[str], kind: str, axis: list[str]
) -> None:
    assert window_axis(labels, kind) == axis
