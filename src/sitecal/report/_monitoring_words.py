"""The monitoring report's words: tests, alerts, captions and methods, from the document's codes.

``monitoring.json`` carries codes and numbers (``kind="score_shift"``, ``value``, ``reference``); this
module turns them into the sentences the report prints. Functions returning markup escape every piece of
text that came from outside (criterion ids, group names); the constants are markup written here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sitecal.metrics.registry import ACCURACY, CALIBRATION_GAP, ECE
from sitecal.results import MonitorAlert, MonitorBaseline, MonitoringDocument, MonitorTest, MonitorWindow

from ._context import METRIC_NAMES
from ._monitoring_figures import AlarmMark
from ._text import format_count, format_value, para_text, short_sha

__all__ = [
    "METRIC_ORDER",
    "REFERENCE",
    "TEMPERATURE",
    "TEST_KIND",
    "methods_paragraphs",
    "metric_label",
    "short_test",
    "test_text",
    "warning_text",
]

#: The window metrics, in the order their figures are drawn; the fitted temperature comes after them.
METRIC_ORDER = (CALIBRATION_GAP.name, ECE.name, ACCURACY.name)
TEMPERATURE = "temperature"
#: The kind of test whose margins are drawn on a metric's figure.
TEST_KIND = {CALIBRATION_GAP.name: "gap", ACCURACY.name: "accuracy", TEMPERATURE: "temperature"}
#: The value of a calibrated model on a metric's figure (a thin grey line).
REFERENCE = {CALIBRATION_GAP.name: 0.0, TEMPERATURE: 1.0}

_KIND_WORDS = {
    "temperature": "temperature the data would fit on top of the deployed calibration",
    "gap": "calibration gap (mean confidence − accuracy)",
    "accuracy": "accuracy",
}
_SIDE_WORDS = {
    ("temperature", "above"): "over-confident",
    ("temperature", "below"): "under-confident",
    ("gap", "above"): "over-confident",
    ("gap", "below"): "under-confident",
    ("accuracy", "below"): "less accurate",
}

READING = (
    "An <b>alarm</b> is raised by an anytime-valid test of one of the validation's margins (Methods): its "
    "false-alarm probability is bounded over the whole horizon, however often monitoring runs. The "
    "per-window intervals in the figures are not: they describe one window each. The <b>warnings</b> need "
    "no labels and come earlier, but are not tests with that guarantee."
)
ALARMS_LEAD = (
    "Each row is a test of the family whose evidence (log e-value, accumulated over the windows) reached its "
    "threshold log(tests / alpha); the window is the first at which it did. An alarm stays raised once "
    "raised."
)
NO_ALARM = (
    "<b>No alarm.</b> No test's evidence reached its threshold in any window shown. This is no proof that "
    "calibration held: a test has power only where labels came, and only for the drift it is built for "
    "(Methods)."
)
WARNINGS_LEAD = (
    "Checks that need no label: they can come before the labels do. None is an alarm, and none is covered by "
    "the family-wise guarantee."
)
NO_WARNING = "No label-free warning in any window shown."
TRENDS_LEAD = (
    "For each group: each metric per window, the estimate (point) with its 95 % bootstrap interval (bar) of "
    "that window alone; the margins of the group's tests (dashed red); the window where a test of the group "
    "first alarmed (dotted red, labelled); and the evidence of the group's tests, which is what decides the "
    "alarms. Windows where the group had no labelled data, or no study, are gaps."
)
NO_METRICS = (
    "No window of this group holds metrics: too few labelled studies (or labels of one class only) in every "
    "window."
)


def group_name(attribute: str, group: str) -> str:
    """``All studies`` or ``attribute: group`` (plain text)."""
    return "All studies" if attribute == "overall" else f"{attribute}: {group}"


def metric_label(metric: str) -> str:
    """The printed name of a window metric (the registry's label) or of the fitted temperature."""
    if metric == TEMPERATURE:
        return "Fitted temperature"
    return METRIC_NAMES.get(metric, metric.replace("_", " "))


def metric_axis(metric: str) -> str:
    return "temperature" if metric == TEMPERATURE else metric_label(metric).split(" (")[0]


def test_text(test: MonitorTest) -> str:
    """Markup: ``criterion slope: temperature … above 1.250 (over-confident)``."""
    side = _SIDE_WORDS.get((test.kind, test.side))
    return (
        f"criterion {para_text(test.criterion)}: {_KIND_WORDS.get(test.kind, test.kind)} {test.side} "
        f"{format_value(test.margin)}" + (f" ({side})" if side else "")
    )


def short_test(test: MonitorTest, *, criterion: bool = False) -> str:
    """Plain text for a figure: ``temperature above 1.25``, with the criterion's id if asked."""
    text = f"{test.kind} {test.side} {test.margin:g}"
    return f"{text} ({test.criterion})" if criterion else text


def _first_alarm(document: MonitoringDocument) -> MonitorAlert | None:
    return min((a for a in document.alerts if a.kind == "alarm"), key=lambda a: a.window, default=None)


def verdict_sentence(document: MonitoringDocument, axis: Sequence[str]) -> str:
    """Markup beside the verdict: what alarmed first, or that nothing did, over which windows."""
    span = f"{para_text(axis[0])} to {para_text(axis[-1])}" if axis else "no window"
    n_alarms = sum(a.kind == "alarm" for a in document.alerts)
    n_warnings = len(document.alerts) - n_alarms
    warned = f" {n_warnings:,} label-free warning{'s' * (n_warnings != 1)} (Alerts)." if n_warnings else ""
    first = _first_alarm(document)
    if first is None:
        return (
            f"No test of the family ({len(document.tests):,} tests) reached its threshold over the windows "
            f"{span}.{warned}"
        )
    where = para_text(group_name(first.attribute, first.group), max_chars=120)
    return (
        f"{n_alarms:,} test{'s' * (n_alarms != 1)} of {len(document.tests):,} alarmed over the windows "
        f"{span}; the first at <b>{para_text(first.window)}</b>, <b>{where}</b>.{warned}"
    )


def calibration_text(baseline: MonitorBaseline) -> str:
    per = f"one temperature per {para_text(baseline.per)}" if baseline.per else "one global temperature"
    return f"{per}; calibration.json sha256 {short_sha(baseline.calibration_sha256)}"


def windows_text(document: MonitoringDocument, axis: Sequence[str]) -> str:
    if not axis:
        return f"{document.window_kind}s; none holds a study"
    stored = len({w.window for w in document.windows})
    empty = len(axis) - stored
    return (
        f"{document.window_kind}s, {para_text(axis[0])} to {para_text(axis[-1])}: {len(axis):,} windows"
        + (f", {empty:,} of them without any study" if empty > 0 else "")
    )


def alpha_text(document: MonitoringDocument) -> str:
    threshold = f"; alarm threshold log e-value {document.tests[0].threshold:.2f}" if document.tests else ""
    return (
        f"alpha {document.alpha:g} (family-wise false-alarm probability over the horizon), horizon "
        f"{document.horizon:,} windows; {len(document.tests):,} tests in the family{threshold}"
    )


def excluded_text(excluded: Mapping[str, int]) -> str:
    if not excluded:
        return "none"
    return "; ".join(f"{para_text(reason)}: {format_count(n)}" for reason, n in excluded.items())


def _p_value(p: float | None) -> str:
    if p is None:
        return "not recorded"
    return f"{p:.1e}" if 0 < p < 0.001 else format_value(p)


def warning_text(alert: MonitorAlert) -> str:
    """Markup: one label-free warning in plain language."""
    if alert.kind == "new_group":
        return (
            "<b>New group:</b> a value not seen before: by the validation or, for a subgroup the "
            "validation did not report (a software version, a station), in the first monitored window. It "
            "has no test of its own and no acceptance of the validation covers it."
        )
    if alert.kind == "unseen_group":
        return (
            "<b>No temperature of its own:</b> the global one was applied. The validation did not fit this "
            "group's calibration."
        )
    if alert.kind == "score_shift":
        return (
            "<b>Score shift:</b> the confidences differ from those of the baseline's evaluation studies "
            f"(Kolmogorov-Smirnov statistic {format_value(alert.value)}, p = {_p_value(alert.reference)}). "
            "A warning, not an alarm: not corrected for repeated looks beyond Bonferroni over the windows "
            "shown."
        )
    if alert.kind == "accuracy_estimate":
        return (
            "<b>Accuracy estimate:</b> the accuracy the model expects of itself (mean confidence "
            f"{format_value(alert.value)}) is below the margin {format_value(alert.reference)}; blind to "
            "miscalibration."
        )
    return para_text(alert.kind)


def rows_left_out(n: int, what: str) -> str:
    return f"Not printed: {n:,} further {what} (this table prints the first ones); monitoring.json holds all."


def group_lead(
    windows: Sequence[MonitorWindow], tests: Sequence[MonitorTest], marks: Sequence[AlarmMark]
) -> str:
    studies = sum(w.n_studies for w in windows)
    labelled = sum(w.n_labelled for w in windows)
    tested = (
        f"{len(tests):,} test{'s' * (len(tests) != 1)} of the family"
        if tests
        else "no test of the family (outside the family: its figures are descriptive only)"
    )
    alarmed = (
        "; alarm: " + "; ".join(f"{para_text(m.text)} at {para_text(m.window)}" for m in marks)
        if marks
        else ""
    )
    return (
        f"{len(windows):,} windows, {format_count(studies)} studies, {format_count(labelled)} labelled; "
        f"{tested}{alarmed}."
    )


def trend_caption(
    metric: str, key: tuple[str, str], margins: Sequence[float], evidence_no: int | None
) -> str:
    where = para_text(group_name(*key), max_chars=120)
    what = (
        "the temperature the window's labelled studies would fit on top of the deployed calibration "
        "(1: the deployed calibration holds; above 1: over-confident)"
        if metric == TEMPERATURE
        else para_text(metric_label(metric))
    )
    if margins:
        margin = (
            "Dashed: the margins of its tests, " + ", ".join(format_value(m) for m in sorted(margins)) + "."
        )
    elif metric == ECE.name:
        margin = (
            "No test watches this ECE itself: an ECE criterion is watched through the calibration gap. A "
            "point outside its bar is printed as computed: resampling patients biases a plug-in ECE upward, "
            "so its percentile interval can lie above the estimate."
        )
    else:
        margin = "No test of the family watches this metric for this group: no margin drawn."
    evidence = (
        f"the alarms come from the anytime-valid evidence below (Figure {evidence_no})"
        if evidence_no
        else "this group has no test of its own"
    )
    return (
        f"{what}, {where}, per window: estimate and 95 % bootstrap interval (patients resampled) of that "
        f"window alone, not adjusted for repeated looks; {evidence}. {margin}"
    )


def evidence_caption(tests: Sequence[MonitorTest]) -> str:
    return (
        "Evidence of each test of the group: its log e-value at the end of each window, over every window "
        "before it. A test alarms the first time its line reaches the dashed threshold, log(tests / alpha) = "
        f"{format_value(tests[0].threshold, digits=2)}. Each line is labelled kind, side, margin (criterion)."
    )


def window_note(w: MonitorWindow) -> str:
    notes = []
    if w.fallback:
        notes.append("global temperature")
    if w.alarms:
        notes.append(f"alarm ({len(w.alarms)} test{'s' * (len(w.alarms) != 1)})")
    if w.n_labelled and w.metrics is None:
        notes.append("too few labels for metrics")
    return para_text("; ".join(notes)) if notes else ""


def methods_paragraphs(document: MonitoringDocument) -> list[str]:
    """Markup: what each test is, the guarantee, and what it does not cover."""
    kinds = {t.kind for t in document.tests}
    tests = []
    if "gap" in kinds:
        tests.append(
            "<b>Calibration gap</b> (from a top-label ECE criterion below a margin m, judged after "
            "calibration): per labelled study, confidence minus correct (between −1 and 1); two tests, the "
            "mean above m and below −m, each by betting against a bounded mean (Waudby-Smith and Ramdas). "
            "Every top-label ECE bounds the absolute mean gap, so an alarm means the ECE exceeds m; "
            "miscalibration whose gaps cancel (over-confident at some confidences, under-confident at "
            "others) is not seen."
        )
    if "accuracy" in kinds:
        tests.append(
            "<b>Accuracy</b> (from an accuracy criterion above a margin m): per labelled study, correct or "
            "not; the test alarms when the mean falls below m (betting against a bounded mean)."
        )
    if "temperature" in kinds:
        tests.append(
            "<b>Temperature</b> (from a calibration slope criterion within [a, b]): the likelihood ratio of "
            "the labels under the deployed scores rescaled by a temperature beyond 1/a (over-confident) or "
            "below 1/b (under-confident), against the margin. Valid whatever the case mix; miscalibration of "
            "another shape than a temperature (one class only, say) is outside its family and not covered."
        )
    family = (
        f"The family holds {len(document.tests):,} tests, fixed by the baseline's acceptance criteria judged "
        "after calibration, for all studies and each group of the calibration attribute. "
        + (" ".join(tests) if tests else "No criterion of the baseline gives a test: nothing can alarm.")
    )
    guarantee = (
        "Each test's evidence is an e-process: every window's labelled studies add their log likelihood "
        "ratios (or betting gains) against the margin, mixed over the window a drift may start in (any of "
        f"the first {document.horizon:,} windows, the horizon), so that evidence gathered before a drift "
        "does not mask it. A test alarms when its log e-value reaches log(K / alpha), K the tests of the "
        "family. <b>Guarantee:</b> while every group's calibration stays within its margins, the "
        f"probability that any test of the family ever alarms is at most alpha = {document.alpha:g} "
        "(Ville's inequality, with "
        "Bonferroni over the family), however often monitoring runs and whenever it stops. After the horizon "
        "the tests stay valid, but a drift that starts later is detected more slowly."
    )
    not_covered = (
        "<b>Not covered.</b> The label-free warnings (new groups, groups on the global temperature, score "
        "shifts, the accuracy the model expects) are checks, not tests of the family. Groups of other "
        "attributes and groups the baseline never saw have no test. Criteria other than those above (NLL, "
        "Brier, O:E, intercept, smooth or class-wise ECE) are not watched. Studies without a label add no "
        "evidence until their label comes. The per-window intervals (95 % bootstrap, patients resampled) "
        "describe one window each and are not adjusted for repeated looks. The guarantee assumes labels "
        "independent given the scores and the past, and the alternatives, the horizon and the family fixed "
        "before monitoring began."
    )
    return [family, guarantee, not_covered]
