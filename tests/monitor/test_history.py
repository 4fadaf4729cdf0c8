"""The monitoring history: windows stored, planned, replaced and read back the same, in a SQLite file and
in PostgreSQL (``store``: both), and every way a database can be unusable refused with nothing changed."""

from __future__ import annotations

import hashlib
import math
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from tests.monitor.conftest import StoreUnderTest

from sitecal.errors import DataError
from sitecal.monitor import (
    MAX_RESULT_BYTES,
    SCHEMA_VERSION,
    History,
    HistoryError,
    Plan,
    WindowEntry,
    WindowKey,
    _history,
    _history_sql,
)

pytestmark = pytest.mark.timeout(60)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def entry(window: str, group: str = "GE Signa", *, data: str = "v1", labelled: bool = True, **result: object):
    return WindowEntry(
        window, "scanner", group, sha(f"{window}/{group}/{data}"), labelled, result or {"n": 10, "ece": 0.05}
    )


ENTRIES = [
    entry("2027-01", "GE Signa", n=120, ece=0.031, ci=[0.012, 0.058]),
    entry("2027-01", "Siemens Aera", n=80, ece=0.044, ci=[0.02, 0.09]),
    entry("2027-02", "GE Signa", n=131, ece=0.029, ci=[0.011, 0.052]),
    WindowEntry("2027-02", "overall", "All studies", sha("2027-02/all"), True, {"n": 211, "ece": 0.03}),
]


# -- stored, read back, planned ----------------------------------------------------------------------------


def test_write_and_read_back_in_a_fixed_order(store: StoreUnderTest) -> None:
    shuffled = list(ENTRIES)
    random.Random(7).shuffle(shuffled)
    with store.open() as history:
        assert history.entries() == []
        history.write(shuffled)
        assert history.entries() == sorted(ENTRIES, key=lambda e: e.key)
    with store.open(create=False) as history:  # re-opened: what was written lasts
        stored = history.entries()
        assert stored == sorted(ENTRIES, key=lambda e: e.key)
        assert [e.key for e in stored] == sorted(e.key for e in ENTRIES)
        assert history.baseline_id == "run-1" and history.window_kind == "month"
        assert all(e.written_utc and e.written_utc.endswith("Z") and e.sitecal_version for e in stored)
        assert history.entry("2027-01", "scanner", "Siemens Aera") == ENTRIES[1]
        assert history.entry("2027-03", "scanner", "GE Signa") is None
        # read back: tuples are lists, numbers are equal
        assert history.entry("2027-01", "scanner", "GE Signa").result["ci"] == [0.012, 0.058]


def test_insertion_order_does_not_change_what_is_read(store: StoreUnderTest, tmp_path: Path) -> None:
    forward = list(ENTRIES)
    with store.open() as history:
        for e in reversed(forward):
            history.write([e])
        assert history.entries() == sorted(forward, key=lambda e: e.key)


def test_plan_sorts_windows_into_new_changed_unchanged_and_kept(store: StoreUnderTest) -> None:
    with store.open() as history:
        history.write(ENTRIES[:3])
        plan = history.plan(
            [
                ("2027-03", "scanner", "GE Signa", sha("x")),  # new
                ("2027-02", "scanner", "GE Signa", ENTRIES[2].data_sha256),  # unchanged
                ("2027-01", "scanner", "GE Signa", sha("labels came")),  # changed
            ]
        )
    assert plan == Plan(
        new=(WindowKey("2027-03", "scanner", "GE Signa"),),
        changed=(WindowKey("2027-01", "scanner", "GE Signa"),),
        unchanged=(WindowKey("2027-02", "scanner", "GE Signa"),),
        kept=(WindowKey("2027-01", "scanner", "Siemens Aera"),),
    )
    assert plan.to_compute == (("2027-01", "scanner", "GE Signa"), ("2027-03", "scanner", "GE Signa"))


def test_late_labels_complete_a_window_and_leave_the_others_alone(
    store: StoreUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    early = entry("2027-03", labelled=False, data="scores only", n=50)
    with store.open() as history:
        history.write([*ENTRIES, early])
        before = {e.key: e.written_utc for e in history.entries()}
    monkeypatch.setattr(_history, "_utc_now", lambda: "2099-01-01T00:00:00Z")  # a replaced row shows it
    late = entry("2027-03", labelled=True, data="scores and labels", n=50, ece=0.04)
    with store.open() as history:
        assert history.plan([(*late.key, late.data_sha256)]).changed == (late.key,)
        history.write([*ENTRIES, late])
        after = {e.key: e for e in history.entries()}
    assert after[late.key] == late and after[late.key].labelled
    assert after[late.key].written_utc == "2099-01-01T00:00:00Z" != before[late.key]
    for e in ENTRIES:  # unchanged windows keep their row, written time included
        assert after[e.key] == e and after[e.key].written_utc == before[e.key]
    assert len(after) == len(ENTRIES) + 1


def test_writing_the_same_entries_again_changes_nothing(
    store: StoreUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    with store.open() as history:
        history.write(ENTRIES)
    first = store.snapshot()
    monkeypatch.setattr(_history, "_utc_now", lambda: "2099-01-01T00:00:00Z")  # a rewritten row would show it
    with store.open() as history:
        history.write(ENTRIES)
        history.write(list(reversed(ENTRIES)))
    assert store.snapshot() == first  # rows (times too) and, for SQLite, the file's bytes


def test_floats_read_back_identical(store: StoreUnderTest) -> None:
    rng = random.Random(20270301)
    floats = [
        0.1 + 0.2,
        1 / 3,
        -0.0,
        5e-324,
        2.2250738585072014e-308,
        1.7976931348623157e308,
        1e-17,
        123456789.1,
    ]
    floats += [rng.random() * 10 ** rng.randint(-30, 30) for _ in range(500)]
    floats += [math.nextafter(0.05, 1.0), math.nextafter(0.05, 0.0)]
    result = {"values": floats, "nested": {"interval": [floats[0], floats[1]]}, "big": 2**70, "ok": True}
    with store.open() as history:
        history.write([entry("2027-05", **result)])
    with store.open() as history:
        back = history.entry("2027-05", "scanner", "GE Signa").result
    assert back["values"] == floats and back["big"] == 2**70
    assert [x.hex() for x in back["values"]] == [x.hex() for x in floats]  # bit for bit, the sign of -0.0 too
    assert math.copysign(1.0, back["values"][2]) == -1.0


def test_a_failed_write_keeps_the_old_history(store: StoreUnderTest, monkeypatch: pytest.MonkeyPatch) -> None:
    with store.open() as history:
        history.write(ENTRIES)
    before = store.snapshot()
    calls = []
    real = _history_sql.Store.upsert

    def fail_on_the_second(self, row):  # the first row written, then the run dies
        calls.append(row)
        if len(calls) == 2:
            raise KeyboardInterrupt
        real(self, row)

    monkeypatch.setattr(_history_sql.Store, "upsert", fail_on_the_second)
    new = [entry("2027-01", data="changed"), entry("2027-04"), entry("2027-05")]
    with store.open() as history, pytest.raises(KeyboardInterrupt):
        history.write(new)
    assert len(calls) == 2
    assert store.snapshot() == before
    monkeypatch.undo()
    with store.open() as history:
        assert history.entries() == sorted(ENTRIES, key=lambda e: e.key)


def test_a_killed_run_keeps_the_old_history(store: StoreUnderTest) -> None:
    """A process killed (SIGKILL) in the middle of its write transaction: the history is as before."""
    with store.open() as history:
        history.write(ENTRIES)
    child = textwrap.dedent(
        f"""
        import sys, time
        from sitecal.monitor import History, WindowEntry, _history_sql
        real = _history_sql.Store.upsert
        def upsert(self, row):
            real(self, row)
            print("written", flush=True)
            time.sleep(60)
        _history_sql.Store.upsert = upsert
        history = History.open({store.where!r}, baseline_id="run-1", window_kind="month",
                               password_file={str(store.password_file) if store.password_file else None!r})
        history.write([WindowEntry("2027-01", "scanner", "GE Signa", "0" * 64, True, {{"n": 1}}),
                       WindowEntry("2027-09", "scanner", "GE Signa", "1" * 64, True, {{"n": 2}})])
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "written"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        proc.stdout.close()
    with store.open() as history:
        assert history.entries() == sorted(ENTRIES, key=lambda e: e.key)
        history.write([entry("2027-09")])  # and it takes the next write
        assert history.entry("2027-09", "scanner", "GE Signa") == entry("2027-09")


# -- refused, with nothing changed ------------------------------------------------------------------------


def test_another_baseline_is_refused(store: StoreUnderTest) -> None:
    with store.open(baseline_id="validation-2027-01") as history:
        history.write(ENTRIES)
    before = store.snapshot()
    with pytest.raises(HistoryError) as err:
        store.open(baseline_id="validation-2027-06")
    message = str(err.value)
    assert "'validation-2027-01', not 'validation-2027-06'" in message
    assert "new monitoring folder (or database) for the new baseline" in message
    assert store.snapshot() == before


def test_another_window_kind_is_refused(store: StoreUnderTest) -> None:
    with store.open(window_kind="month") as history:
        history.write(ENTRIES)
    before = store.snapshot()
    with pytest.raises(
        HistoryError, match=r"holds 'month' windows, not 'week': monitor by 'month' as before"
    ):
        store.open(window_kind="week")
    assert store.snapshot() == before


@pytest.mark.parametrize("version", [SCHEMA_VERSION - 1, SCHEMA_VERSION + 1])
def test_another_schema_version_is_refused(store: StoreUnderTest, version: int) -> None:
    with store.open() as history:
        history.write(ENTRIES)
    store.sql("UPDATE sitecal_monitor_meta SET value = ? WHERE key = 'schema_version'", (str(version),))
    before = store.snapshot()
    with pytest.raises(HistoryError) as err:
        store.open()
    message = str(err.value)
    assert f"has schema version {version}" in message and f"reads version {SCHEMA_VERSION}" in message
    assert "never converts a history silently" in message and "Nothing in it was changed" in message
    assert ("Upgrade sitecal" in message) == (version > SCHEMA_VERSION)
    assert store.snapshot() == before


def test_our_table_names_without_our_columns_are_refused(store: StoreUnderTest) -> None:
    store.sql("CREATE TABLE sitecal_monitor_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    store.sql("CREATE TABLE sitecal_monitor_window (window_label TEXT, result TEXT)")
    store.sql("INSERT INTO sitecal_monitor_meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
    before = store.snapshot()
    with pytest.raises(HistoryError, match=r"named like a sitecal monitoring history but not its layout"):
        store.open()
    assert store.snapshot() == before


def test_a_locked_history_is_refused_quickly(store: StoreUnderTest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another monitor in the middle of its write: the second one stops with 'locked' after its timeout."""
    with store.open() as history:
        history.write(ENTRIES[:1])
    inside, release = threading.Event(), threading.Event()
    real = _history_sql.Store.upsert

    def upsert(self, row):
        real(self, row)
        inside.set()
        release.wait(20)

    monkeypatch.setattr(_history_sql.Store, "upsert", upsert)

    def first_monitor() -> None:
        with store.open() as first:
            first.write([entry("2027-06")])

    writer = threading.Thread(target=first_monitor)
    writer.start()
    try:
        assert inside.wait(20)
        second = store.open(lock_timeout_s=0.3)
        started = time.monotonic()
        with pytest.raises(HistoryError) as err:
            second.write([entry("2027-07")])
        assert time.monotonic() - started < 3
        second.close()
    finally:
        release.set()
        writer.join(20)
    assert "is locked: another sitecal monitor is running on it? Wait and run again" in str(err.value)
    assert isinstance(err.value, DataError)  # a SitecalError: the command exits 2
    with store.open() as history:  # the first one's write went through; the second one's did not
        assert [e.window for e in history.entries()] == ["2027-01", "2027-06"]


def test_an_oversized_result_is_refused(store: StoreUnderTest) -> None:
    with store.open() as history:
        history.write(ENTRIES)
        before = store.snapshot()
        big = entry("2027-08", per_study=["x" * 1000] * (MAX_RESULT_BYTES // 1000 + 1))
        with pytest.raises(HistoryError, match=r"over the limit of 1048576: store aggregates only"):
            history.write([entry("2027-09"), big])
    assert store.snapshot() == before


def test_an_oversized_or_edited_row_in_the_database_is_refused(store: StoreUnderTest) -> None:
    with store.open() as history:
        history.write(ENTRIES)
    store.sql(
        "UPDATE sitecal_monitor_window SET result = ? WHERE window_label = '2027-01'", ("[" * 2_000_000,)
    )
    with store.open() as history, pytest.raises(HistoryError, match=r"holds a row over the size limits"):
        history.entries()
    store.sql("UPDATE sitecal_monitor_window SET result = ? WHERE window_label = '2027-01'", ('{"n": 1}',))
    with store.open() as history, pytest.raises(HistoryError, match=r"not in sitecal's canonical form"):
        history.entries()
    store.sql("UPDATE sitecal_monitor_window SET result = ? WHERE window_label = '2027-01'", ('{"n":NaN}',))
    with store.open() as history, pytest.raises(HistoryError, match=r"is not a result sitecal wrote"):
        history.entries()


def test_a_history_over_the_row_limit_is_refused(
    store: StoreUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    with store.open() as history:
        history.write(ENTRIES)
        before = store.snapshot()
        monkeypatch.setattr(_history, "MAX_ROWS", len(ENTRIES))  # the limit's logic, at a small limit
        with pytest.raises(HistoryError, match=r"would hold 5 windows, over the limit of 4: nothing"):
            history.write([entry("2027-09")])
        assert store.snapshot() == before
        monkeypatch.setattr(_history, "MAX_ROWS", len(ENTRIES) - 1)
        with pytest.raises(HistoryError, match=r"holds 4 windows with \d+ bytes of results, over the"):
            history.entries()
        with pytest.raises(HistoryError, match=r"over the limits of 3 windows"):
            history.plan([])


@pytest.mark.parametrize(
    ("result", "message"),
    [
        ({"ece": math.nan}, r"\['ece'\] is nan: JSON has no NaN"),
        ({"ci": [0.1, math.inf]}, r"\['ci'\]\[1\] is inf"),
        ({1: 0.5}, r"has the key 1: keys must be texts"),
        ({"when": object()}, r"\['when'\] is a object: a result holds only"),
        ({"n": 10**5000}, r"cannot be written as JSON: Exceeds the limit"),
    ],
)
def test_results_that_would_not_read_back_the_same_are_refused(
    tmp_path: Path, result: dict, message: str
) -> None:
    with History.open(tmp_path / "h.sqlite", baseline_id="run-1", window_kind="month") as history:
        with pytest.raises(HistoryError, match=message):
            history.write([WindowEntry("2027-01", "scanner", "GE Signa", sha("x"), True, result)])
        assert history.entries() == []


@pytest.mark.parametrize(
    ("kind", "good", "bad"),
    [
        ("month", "2027-12", ["2027-13", "2027-3", "27-03", "2027-00", "2027-W09", "２０２７-03"]),
        ("week", "2026-W53", ["2027-W53", "2027-W00", "2027-W9", "2027-03"]),
        ("quarter", "2027-Q4", ["2027-Q5", "2027-Q0", "2027-03"]),
    ],
)
def test_window_labels_are_checked_against_the_kind(
    tmp_path: Path, kind: str, good: str, bad: list[str]
) -> None:
    with History.open(tmp_path / "h.sqlite", baseline_id="run-1", window_kind=kind) as history:
        history.write([entry(good)])
        for label in bad:
            with pytest.raises(HistoryError, match=rf"The window '{label}' is not an? "):
                history.write([entry(label)])
            with pytest.raises(HistoryError, match=r"is not an? "):
                history.plan([(label, "scanner", "GE Signa", sha("x"))])
        assert [e.window for e in history.entries()] == [good]


def test_bad_arguments_are_refused_with_their_name(tmp_path: Path) -> None:
    where = tmp_path / "h.sqlite"
    with pytest.raises(
        HistoryError, match=r"The window kind must be one of 'week', 'month', 'quarter'. Got 'monthly'"
    ):
        History.open(where, baseline_id="run-1", window_kind="monthly")
    with pytest.raises(HistoryError, match=r"data_sha256 must be a sha256"):
        WindowEntry("2027-01", "scanner", "GE Signa", "ABC", True, {})
    with pytest.raises(HistoryError, match=r"The group must be a text of 1 to 256 printable characters"):
        WindowEntry("2027-01", "scanner", "GE\x00Signa", sha("x"), True, {})
    with History.open(where, baseline_id="run-1", window_kind="month") as history:
        with pytest.raises(HistoryError, match=r"name window 2027-01, scanner 'GE Signa' twice"):
            history.write([entry("2027-01"), entry("2027-01", data="v2")])
        with pytest.raises(HistoryError, match=r"name window 2027-01, scanner 'GE Signa' twice"):
            history.plan([("2027-01", "scanner", "GE Signa", sha("a"))] * 2)
        assert history.entries() == []
    history.close()  # twice is harmless
    with pytest.raises(HistoryError, match=r"is closed: open it again"):
        history.entries()


# -- SQLite files that are not a history ------------------------------------------------------------------


def _unchanged(path: Path, opener) -> str:
    before = path.read_bytes()
    with pytest.raises(HistoryError) as err:
        opener()
    assert path.read_bytes() == before
    return str(err.value)


def test_a_foreign_sqlite_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE studies (id TEXT)")
    message = _unchanged(path, lambda: History.open(path, baseline_id="run-1", window_kind="month"))
    assert message == (
        f"The file {path} is not a sitecal monitoring history (it holds 'studies'); nothing in it was "
        "changed. Name a monitoring folder's history, or a new file."
    )


def test_a_history_with_a_trigger_added_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite"
    with History.open(path, baseline_id="run-1", window_kind="month") as history:
        history.write(ENTRIES)
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TRIGGER t AFTER INSERT ON sitecal_monitor_window "
            "BEGIN DELETE FROM sitecal_monitor_window; END"
        )
    message = _unchanged(path, lambda: History.open(path, baseline_id="run-1", window_kind="month"))
    assert "is not a sitecal monitoring history (it holds 't')" in message


@pytest.mark.parametrize("content", [b"window,group\n2027-01,GE\n", b"SQLite format 3\x00" + b"\xff" * 200])
def test_a_file_that_is_not_a_sqlite_database_is_refused(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "history.sqlite"
    path.write_bytes(content)
    message = _unchanged(path, lambda: History.open(path, baseline_id="run-1", window_kind="month"))
    assert f"The monitoring history {path} is not a SQLite database" in message


def test_a_file_over_the_size_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite"
    with path.open("wb") as f:  # sparse: takes no disk
        f.write(b"SQLite format 3\x00")
        f.truncate(_history_sql.MAX_DATABASE_BYTES + 1)
    with pytest.raises(HistoryError, match=r"is 2147483649 bytes, over the limit of 2147483648"):
        History.open(path, baseline_id="run-1", window_kind="month")


def test_missing_places_are_named(tmp_path: Path) -> None:
    with pytest.raises(
        HistoryError, match=r"There is no monitoring history at .*absent.sqlite: check the path"
    ):
        History.open(tmp_path / "absent.sqlite", baseline_id="run-1", window_kind="month", create=False)
    assert not (tmp_path / "absent.sqlite").exists()
    with pytest.raises(HistoryError, match=r"The folder of the monitoring history .* does not exist"):
        History.open(tmp_path / "no" / "h.sqlite", baseline_id="run-1", window_kind="month")
    with pytest.raises(HistoryError, match=r"is not a file: name a SQLite file"):
        History.open(tmp_path, baseline_id="run-1", window_kind="month")
    with pytest.raises(HistoryError, match=r"The monitoring database mysql://u:\*\*\*@h/db is not supported"):
        History.open("mysql://u:secret@h/db", baseline_id="run-1", window_kind="month")
