"""Monitoring after go-live: scores over time, cut into windows, checked against a sealed validation run.

:class:`History` keeps every window's results (a SQLite file in the monitoring folder, or a PostgreSQL
database), so that monitoring run again on overlapping data adds only the new windows and gives the same
numbers for the old ones.
"""

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

__all__ = [
    "MAX_HISTORY_BYTES",
    "MAX_RESULT_BYTES",
    "MAX_ROWS",
    "SCHEMA_VERSION",
    "History",
    "HistoryError",
    "Plan",
    "WindowEntry",
    "WindowKey",
]
