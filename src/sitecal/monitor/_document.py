"""``monitoring.json`` from the history: every stored window, each test's evidence over time, the alerts.

The evidence of a test at a window is recomputed from the stored increments of every window of its group
up to that one (:func:`sitecal.stats.changepoint_evalues`), over the calendar's consecutive windows from
the first stored to the last: a window without studies adds nothing, but counts as a window a change
may start in. Label-free warnings are checked per window: a group not seen before (by the baseline, or
in the first window for a subgroup the baseline did not report), a group
calibrated by the global temperature, a shift of the confidences (Kolmogorov-Smirnov against the
baseline's evaluation studies, Bonferroni over the windows and groups shown), and an accuracy the model
expects of itself below an accuracy margin.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sitecal.monitor._history import WindowEntry
from sitecal.monitor._tests import log_evidence
from sitecal.monitor._windows import WindowKind, window_label, window_start
from sitecal.results import (
    Interval,
    MonitorAlert,
    MonitorBaseline,
    MonitoringDocument,
    MonitorTest,
    MonitorWindow,
    ProtocolRef,
)

__all__ = ["MonitorContext", "monitoring_document", "window_range"]


@dataclass(frozen=True)
class MonitorContext:
    """What the document says besides the windows: the protocol, the baseline and the settings.

    ``known_groups`` holds the groups the baseline saw per attribute (a value outside them is a new
    group); ``accuracy_margins`` the highest accuracy margin of the baseline's criteria per scope (the
    label-free estimate of a window of that scope's groups is compared with it).
    """

    document_id: str
    created_utc: str
    protocol: ProtocolRef
    baseline: MonitorBaseline
    window_kind: WindowKind
    alpha: float
    horizon: int
    tests: tuple[MonitorTest, ...]
    known_groups: Mapping[str, frozenset[str]]
    accuracy_margins: Mapping[str, float]
    excluded: Mapping[str, int]


def window_range(first: str, last: str, kind: WindowKind) -> list[str]:
    """Every window from ``first`` to ``last``, in calendar order, those without studies included."""
    labels = [first]
    day = window_start(first, kind)
    while labels[-1] != last:
        day += dt.timedelta(days=7 if kind == "week" else 32 if kind == "month" else 93)
        day = window_start(window_label(day, kind), kind)
        labels.append(window_label(day, kind))
    return labels


def _evidence(
    tests: Sequence[MonitorTest],
    by_key: Mapping[tuple[str, str, str], WindowEntry],
    windows: list[str],
    horizon: int,
) -> dict[str, list[float]]:
    """Each test's log e-value at the end of every window of ``windows``."""
    out: dict[str, list[float]] = {}
    for test in tests:
        stored = [by_key.get((w, test.attribute, test.group)) for w in windows]
        rows = [None if e is None else e.result.get("increments", {}).get(test.id) for e in stored]
        width = next((len(r) for r in rows if r), 0)
        if width == 0:
            out[test.id] = [0.0] * len(windows)
            continue
        filled = [r if r else [0.0] * width for r in rows]
        out[test.id] = [float(v) for v in log_evidence(filled, horizon=horizon)]
    return out


def _interval(value: Mapping[str, Any] | None) -> Interval | None:
    return (
        None if value is None else Interval(estimate=value["estimate"], low=value["low"], high=value["high"])
    )


def _window(entry: WindowEntry, evidence: Mapping[str, float], tests: Sequence[MonitorTest]) -> MonitorWindow:
    result = entry.result
    own = [t for t in tests if (t.attribute, t.group) == (entry.attribute, entry.group)]
    metrics = result.get("metrics")
    return MonitorWindow(
        window=entry.window,
        attribute=entry.attribute,
        group=entry.group,
        n_studies=result["n_studies"],
        n_patients=result["n_patients"],
        n_labelled=result["n_labelled"],
        mean_confidence=result["mean_confidence"],
        fallback=result["fallback"],
        metrics=None if not metrics else {name: Interval(**value) for name, value in metrics.items()},
        temperature=_interval(result.get("temperature")),
        evidence={t.id: evidence[t.id] for t in own},
        alarms=tuple(t.id for t in own if evidence[t.id] >= t.threshold),
    )


def _alarms(
    tests: Sequence[MonitorTest], evidence: Mapping[str, list[float]], windows: list[str]
) -> list[MonitorAlert]:
    """One alert per test that crossed its threshold, at the first window it did."""
    alerts = []
    for test in tests:
        crossed = [i for i, value in enumerate(evidence[test.id]) if value >= test.threshold]
        if crossed:
            i = crossed[0]
            alerts.append(
                MonitorAlert(
                    kind="alarm",
                    window=windows[i],
                    attribute=test.attribute,
                    group=test.group,
                    test=test.id,
                    value=evidence[test.id][i],
                    reference=test.threshold,
                )
            )
    return sorted(alerts, key=lambda a: (a.window, a.attribute, a.group, a.test or ""))


def _reference_groups(
    entries: Sequence[WindowEntry], known: Mapping[str, frozenset[str]]
) -> dict[str, frozenset[str]]:
    """The groups a new one is told from, per attribute: the baseline's, or the first window's.

    A subgroup the baseline did not evaluate (a software version or station read only when monitoring)
    has as its reference the groups of its first monitored window: a value that appears later is new.
    """
    first: dict[str, str] = {}
    for entry in entries:  # in window order
        first.setdefault(entry.attribute, entry.window)
    return {
        attribute: known[attribute]
        if attribute in known
        else frozenset(e.group for e in entries if (e.attribute, e.window) == (attribute, window))
        for attribute, window in first.items()
    }


def _warnings(entries: Sequence[WindowEntry], context: MonitorContext) -> list[MonitorAlert]:
    """The label-free warnings, each group's first window for the group kinds, each window otherwise."""
    alerts: list[MonitorAlert] = []
    seen: set[tuple[str, str, str]] = set()
    shift_level = context.alpha / max(1, len(entries))
    reference = _reference_groups(entries, context.known_groups)
    for entry in entries:
        alert = functools.partial(
            MonitorAlert, window=entry.window, attribute=entry.attribute, group=entry.group
        )
        known = reference.get(entry.attribute)
        first_new = ("new", entry.attribute, entry.group) not in seen
        if known is not None and entry.group not in known and first_new:
            seen.add(("new", entry.attribute, entry.group))
            alerts.append(alert(kind="new_group"))
        if entry.result["fallback"] and ("fallback", entry.attribute, entry.group) not in seen:
            seen.add(("fallback", entry.attribute, entry.group))
            alerts.append(alert(kind="unseen_group"))
        shift = entry.result.get("score_shift")
        if shift is not None and shift["p_value"] < shift_level:
            alerts.append(alert(kind="score_shift", value=shift["statistic"], reference=shift["p_value"]))
        expected = entry.result["mean_confidence"]
        accuracy_margin = context.accuracy_margins.get(entry.attribute)
        if accuracy_margin is not None and expected < accuracy_margin:
            alerts.append(alert(kind="accuracy_estimate", value=expected, reference=accuracy_margin))
    return alerts


def monitoring_document(entries: Sequence[WindowEntry], context: MonitorContext) -> MonitoringDocument:
    """The document of every stored window: each window with its evidence, alarms first, then warnings."""
    ordered = sorted(entries, key=lambda e: (e.window, e.attribute, e.group))
    labels = sorted({e.window for e in ordered})
    windows = window_range(labels[0], labels[-1], context.window_kind) if labels else []
    by_key = {(e.window, e.attribute, e.group): e for e in ordered}
    evidence = _evidence(context.tests, by_key, windows, context.horizon)
    at = {w: i for i, w in enumerate(windows)}
    shown = [
        _window(e, {t: values[at[e.window]] for t, values in evidence.items()}, context.tests)
        for e in ordered
    ]
    alarms = _alarms(context.tests, evidence, windows)
    return MonitoringDocument(
        document_id=context.document_id,
        created_utc=context.created_utc,
        protocol=context.protocol,
        baseline=context.baseline,
        window_kind=context.window_kind,
        alpha=context.alpha,
        horizon=context.horizon,
        tests=context.tests,
        windows=tuple(shown),
        alerts=(*alarms, *_warnings(ordered, context)),
        excluded=dict(sorted(context.excluded.items())),
        verdict="alarm" if alarms else "no_alarm",
    )
