"""The monitoring history in PostgreSQL, on a real server on loopback (``postgres`` in conftest.py): what
only a server has: a lock held by another session, passwords, a database shared with other tables, and
the driver missing. The behaviour both stores share is tested in test_history.py over both."""

from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path

import pytest
from tests.monitor.conftest import PG_PASSWORD, PG_USER, PostgresServer

from sitecal.monitor import History, HistoryError, WindowEntry

pytestmark = pytest.mark.timeout(60)

ENTRY = WindowEntry("2027-01", "scanner", "GE Signa", hashlib.sha256(b"x").hexdigest(), True, {"ece": 0.03})


@pytest.fixture
def database(postgres: PostgresServer) -> str:
    return postgres.new_database()


def test_a_table_locked_by_another_session_times_out_with_a_clear_error(
    postgres: PostgresServer, database: str
) -> None:
    url = postgres.url(database)
    with History.open(
        url, baseline_id="run-1", window_kind="month", password_file=postgres.password_file
    ) as h:
        h.write([ENTRY])
    with postgres.admin(database) as other:
        other.execute("BEGIN")
        other.execute("LOCK TABLE sitecal_monitor_window IN ACCESS EXCLUSIVE MODE")
        history = History.open(
            url,
            baseline_id="run-1",
            window_kind="month",
            password_file=postgres.password_file,
            lock_timeout_s=0.3,
        )
        for action in (history.entries, lambda: history.write([ENTRY])):
            started = time.monotonic()
            with pytest.raises(HistoryError) as err:
                action()
            assert time.monotonic() - started < 3
            assert str(err.value) == (
                f"The monitoring history postgresql://{PG_USER}@127.0.0.1:{postgres.port}/{database} is "
                "locked: another sitecal monitor is running on it? Wait and run again. Nothing was written."
            )
        other.execute("ROLLBACK")
        assert history.entries() == [ENTRY]  # the lock gone, the same connection goes on
        history.close()


def test_a_wrong_password_is_refused_without_showing_it(
    postgres: PostgresServer, database: str, tmp_path: Path
) -> None:
    wrong = tmp_path / "password"
    wrong.write_text("not-the-password-4711\n")
    with pytest.raises(HistoryError) as err:
        History.open(postgres.url(database), baseline_id="run-1", window_kind="month", password_file=wrong)
    message = str(err.value)
    assert message.startswith(
        "Cannot connect to the monitoring database "
        f"postgresql://{PG_USER}@127.0.0.1:{postgres.port}/{database}: "
    )
    assert "password authentication failed" in message
    assert "Check the host, port, database, user and password file." in message
    assert "not-the-password-4711" not in message and PG_PASSWORD not in message


def test_a_password_in_the_url_is_refused_and_not_shown(postgres: PostgresServer, database: str) -> None:
    for url in (
        f"postgresql://{PG_USER}:{PG_PASSWORD}@127.0.0.1:{postgres.port}/{database}",
        f"postgresql://{PG_USER}@127.0.0.1:{postgres.port}/{database}?password={PG_PASSWORD}",
    ):
        with pytest.raises(HistoryError) as err:
            History.open(url, baseline_id="run-1", window_kind="month")
        assert PG_PASSWORD not in str(err.value)
        assert "holds a password: sitecal never takes one from a URL" in str(err.value)


def test_the_password_from_pgpassfile(
    postgres: PostgresServer, database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    passfile = tmp_path / "pgpass"
    passfile.write_text(f"127.0.0.1:{postgres.port}:{database}:{PG_USER}:{PG_PASSWORD}\n")
    passfile.chmod(0o600)
    monkeypatch.setenv("PGPASSFILE", str(passfile))
    with History.open(postgres.url(database), baseline_id="run-1", window_kind="month") as history:
        history.write([ENTRY])
        assert history.entries() == [ENTRY]


def test_an_unreadable_password_file_is_named(
    postgres: PostgresServer, database: str, tmp_path: Path
) -> None:
    with pytest.raises(HistoryError, match=r"The password file .*absent cannot be read"):
        History.open(
            postgres.url(database),
            baseline_id="run-1",
            window_kind="month",
            password_file=tmp_path / "absent",
        )


def test_a_database_shared_with_other_tables_holds_the_history(
    postgres: PostgresServer, database: str
) -> None:
    with postgres.admin(database) as conn:
        conn.execute("CREATE TABLE studies_elsewhere (id TEXT)")
    with History.open(
        postgres.url(database), baseline_id="run-1", window_kind="month", password_file=postgres.password_file
    ) as history:
        history.write([ENTRY])
    with postgres.admin(database) as conn:
        tables = {
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
            )
        }
    assert tables == {"studies_elsewhere", "sitecal_monitor_meta", "sitecal_monitor_window"}


def test_an_unreachable_server_is_named(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(
        HistoryError, match=rf"Cannot connect to the monitoring database postgresql://u@127.0.0.1:{port}/db"
    ):
        History.open(f"postgresql://u@127.0.0.1:{port}/db", baseline_id="run-1", window_kind="month")


def test_without_the_driver_the_extra_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg raises ImportError
    with pytest.raises(HistoryError) as err:
        History.open("postgresql://u@127.0.0.1:5432/db", baseline_id="run-1", window_kind="month")
    assert str(err.value) == (
        "A monitoring history in PostgreSQL needs the psycopg driver: pip install 'sitecal[postgres]'."
    )
