"""Monitoring after go-live: scores over time, cut into windows, checked against a sealed validation run.

- :func:`parse_dates`, :func:`read_date`, :func:`window_labels`: study dates to windows (ISO weeks,
  months, quarters);
- :func:`test_family`: the anytime-valid tests the validation's criteria give, per group and direction;
- :func:`window_result`: one window of one group (counts, label-free estimate, metrics, evidence);
- :func:`monitoring_document`: ``monitoring.json`` from every stored window;
- :class:`History` keeps every window's results (a SQLite file in the monitoring folder, or a PostgreSQL
database), so that monitoring run again on overlapping data adds only the new windows and gives the same
numbers for the old ones.
"""

from sitecal.monitor._document import MonitorContext, monitoring_document
from sitecal.monitor._history import (
    MAX_HISTORY_BYTES,
    MAX_RESULT_BYTES,
    MAX_ROWS,
    SCHEMA_VERSION,
    History,
    HistoryError,
    Plan,
    WindowEntry,
    WindowKey,
)
from sitecal.monitor._tests import OVERALL, softmax, test_family
from sitecal.monitor._window_results import GroupWindow, window_result
from sitecal.monitor._windows import WindowKind, parse_dates, read_date, window_labels

__all__ = [
    "MAX_HISTORY_BYTES",
    "MAX_RESULT_BYTES",
    "MAX_ROWS",
    "OVERALL",
    "SCHEMA_VERSION",
    "GroupWindow",
    "History",
    "HistoryError",
    "MonitorContext",
    "Plan",
    "WindowEntry",
    "WindowKey",
    "WindowKind",
    "monitoring_document",
    "parse_dates",
    "read_date",
    "softmax",
    "test_family",
    "window_labels",
    "window_result",
]
