"""``monitoring.json``: a deployed model's calibration over time, window by window, with its alarms.

``sitecal monitor`` writes it into a sealed folder of its own, beside the history database it keeps. Every
window's numbers are those the history stored when the window was first computed (or completed, once its
labels came); the evidence of the sequential tests is recomputed over all stored windows at each run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, ClassVar, Literal

from sitecal.results._codec import Record
from sitecal.results._evaluation import ProtocolRef
from sitecal.results._fields import Constraint, OrAbsent
from sitecal.results._groups import Interval
from sitecal.results._kinds import Count, Positive, Sha256, Share

__all__ = [
    "AlertKind",
    "MonitorAlert",
    "MonitorBaseline",
    "MonitorTest",
    "MonitorWindow",
    "MonitoringDocument",
]

#: What a sequential test judges: the temperature the data would fit on top of the deployed one (a
#: slope-type margin), the signed top-label gap (an ECE margin, which bounds it), or the accuracy.
TestKind = Literal["temperature", "gap", "accuracy"]
#: What an alert says: an alarm of a sequential test, or a label-free early warning.
AlertKind = Literal["alarm", "new_group", "unseen_group", "score_shift", "accuracy_estimate"]


@dataclass(frozen=True, slots=True, kw_only=True)
class MonitorBaseline(Record):
    """The sealed validation run whose deployed calibration is monitored.

    Attributes
    ----------
    run_folder : str
        The run folder's name.
    document_id : str
        Its report's document ID.
    calibration_sha256 : str
        sha256 of its calibration.json, the temperatures applied to every score.
    per : str or None
        The subgroup with one temperature per group; null: one global temperature.
    """

    run_folder: str
    document_id: str
    calibration_sha256: Sha256
    per: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class MonitorTest(Record):
    """One anytime-valid test: a group, a margin of the validation's criteria, and a direction.

    Attributes
    ----------
    id : str
        The test's name in each window's evidence (``<attribute>/<group>/<kind>/<side>``).
    kind : {"temperature", "gap", "accuracy"}
        What is tested (see the statistics page).
    criterion : str
        The id of the validation's acceptance criterion whose margin is used.
    side : {"above", "below"}
        The alarm is raised when the quantity is above (or below) the margin.
    margin : float
        The margin, on the scale of ``kind`` (a temperature, a gap, an accuracy).
    attribute, group : str
        The group tested (``overall`` / ``All studies`` for every study).
    threshold : float
        The log e-value at which the test alarms: log(tests in the family / alpha).
    """

    id: str
    kind: TestKind
    criterion: str
    side: Literal["above", "below"]
    margin: float
    attribute: str
    group: str
    threshold: Positive


@dataclass(frozen=True, slots=True, kw_only=True)
class MonitorWindow(Record):
    """One window of one group: its studies, what needs no label, and what needs labels when they came.

    Attributes
    ----------
    window : str
        ``2027-03`` (month), ``2027-W09`` (ISO week) or ``2027-Q1`` (quarter).
    attribute, group : str
        The group (``overall`` / ``All studies`` for every study).
    n_studies, n_patients, n_labelled : int
        Studies, distinct patients, and studies with a label.
    mean_confidence : float
        The mean top-label probability after the deployed calibration: the accuracy the model expects of
        itself (confidence-based estimation; blind to miscalibration itself).
    fallback : bool
        Whether the group had no temperature of its own in the baseline (it got the global one).
    metrics : Mapping of str to Interval, optional
        With labels: each monitored metric with its 95 % bootstrap interval (patients resampled); a
        fixed-level interval of this window alone, not an alarm.
    temperature : Interval, optional
        With labels: the temperature this window's data would fit on top of the deployed calibration.
    evidence : Mapping of str to float
        Each test's log e-value at the end of this window, over every window up to it.
    alarms : tuple of str
        The tests whose evidence crossed their threshold at this window.
    """

    window: str
    attribute: str
    group: str
    n_studies: Count
    n_patients: Count
    n_labelled: Count
    mean_confidence: Share
    fallback: bool
    metrics: OrAbsent[Mapping[str, Interval]] = None
    temperature: OrAbsent[Interval] = None
    evidence: Mapping[str, float]
    alarms: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class MonitorAlert(Record):
    """An alert, with its evidence.

    Attributes
    ----------
    kind : {"alarm", "new_group", "unseen_group", "score_shift", "accuracy_estimate"}
        ``alarm``: a test crossed its threshold (``test``, ``value`` its log e-value); ``new_group``: a
        value of a subgroup the baseline never saw (a new scanner, software version or station), or of a
        subgroup the baseline did not report, one its first monitored window did not have;
        ``unseen_group``: a group without a temperature of its own, calibrated by the global one;
        ``score_shift``: the window's confidences differ from the baseline's evaluation studies
        (``value`` the Kolmogorov-Smirnov statistic, ``reference`` its p-value); ``accuracy_estimate``:
        the accuracy the model expects (``value``) is below an accuracy margin (``reference``).
    window, attribute, group : str
        Where.
    test : str, optional
        The alarmed test's id.
    value, reference : float, optional
        The evidence, as ``kind`` says.
    """

    kind: AlertKind
    window: str
    attribute: str
    group: str
    test: OrAbsent[str] = None
    value: OrAbsent[float] = None
    reference: OrAbsent[float] = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MonitoringDocument(Record):
    """``monitoring.json``: every window's results, the tests, the alerts, and whether anything alarmed.

    Attributes
    ----------
    document_id : str
        The trend report's document ID (``SC-`` and 12 hex digits, from the protocol's and the baseline
        calibration's sha256 and the time): names ``monitoring.dcm`` in the archive.
    created_utc : str
        When the monitor ran (UTC); the report is dated by it.
    protocol : ProtocolRef
        The monitoring protocol.
    baseline : MonitorBaseline
        The validation run monitored.
    window_kind : {"week", "month", "quarter"}
        The windows' length.
    alpha : float
        The family-wise false-alarm probability over the horizon.
    horizon : int
        Windows a change may start in.
    tests : tuple of MonitorTest
        The family of tests, fixed by the baseline's groups and criteria.
    windows : tuple of MonitorWindow
        Every window of every group, in (window, attribute, group) order.
    alerts : tuple of MonitorAlert
        Alarms first, then the label-free warnings, each in window order.
    excluded : Mapping of str to int
        What was left out, by reason: studies (rows of a predictions file), and for DICOM studies also
        files and label rows (the reason then begins with its unit, ``file: truncated file``).
    verdict : {"no_alarm", "alarm"}
        Whether any test alarmed.
    """

    SCHEMA_VERSION: ClassVar[int] = 1
    FILE_NAME: ClassVar[str] = "monitoring.json"
    HINT: ClassVar[str] = (
        " The monitoring folder was edited or written by a faulty sitecal; run monitor again."
    )

    document_id: Annotated[str, Constraint(pattern=r"^SC-[0-9A-F]{12}$")]
    created_utc: Annotated[str, Constraint(pattern=r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")]
    protocol: ProtocolRef
    baseline: MonitorBaseline
    window_kind: Literal["week", "month", "quarter"]
    alpha: Share
    horizon: Count
    tests: tuple[MonitorTest, ...]
    windows: tuple[MonitorWindow, ...]
    alerts: tuple[MonitorAlert, ...]
    excluded: Mapping[str, Count]
    verdict: Literal["no_alarm", "alarm"]
