"""The two stores a monitoring history lives in, for the tests: a SQLite file, and a real PostgreSQL server.

The server is started once per test process on 127.0.0.1 (a free port, its socket in a temporary folder,
password authentication) and each test gets a database of its own. PostgreSQL refuses to run as root: as
root, the server runs as the 'postgres' user (or 'nobody') through runuser.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sitecal.monitor import History

#: The password of the test server's user (a throwaway server on loopback).
PG_PASSWORD = "monitor-test-password"
PG_USER = "sitecal"
_MISSING = (
    "PostgreSQL's server programs (initdb, pg_ctl) are not installed: the history's PostgreSQL tests run a "
    "real server. .ci/run installs the Debian package 'postgresql'; here: apt-get install postgresql."
)


def _server_bin() -> Path:
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0,
    )
    if found:
        return found[-1].parent
    initdb = shutil.which("initdb")
    if initdb and shutil.which("pg_ctl"):
        return Path(initdb).parent
    pytest.fail(_MISSING, pytrace=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PostgresServer:
    port: int
    password_file: Path

    def admin(self, dbname: str = "postgres") -> Any:
        import psycopg

        return psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            user=PG_USER,
            dbname=dbname,
            password=PG_PASSWORD,
            autocommit=True,
        )

    def url(self, dbname: str) -> str:
        return f"postgresql://{PG_USER}@127.0.0.1:{self.port}/{dbname}"

    def new_database(self) -> str:
        name = "h_" + uuid.uuid4().hex[:12]
        with self.admin() as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return name


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server on loopback for this test process."""
    bin_dir = _server_bin()
    root = Path(tempfile.mkdtemp(prefix="sitecal-pg-"))
    run_as: list[str] = []
    if os.getuid() == 0:
        user = next((u for u in ("postgres", "nobody") if _has_user(u)), None)
        if user is None or not shutil.which("runuser"):
            pytest.fail(
                "Running as root, the PostgreSQL tests need the user 'postgres' or 'nobody' and runuser."
            )
        run_as = ["runuser", "-u", user, "--"]
        shutil.chown(root, user=user)
    pwfile = root / "pwfile"
    pwfile.write_text(PG_PASSWORD + "\n")
    client_password = Path(tempfile.mkdtemp(prefix="sitecal-pg-client-")) / "password"
    client_password.write_text(PG_PASSWORD + "\n")
    if run_as:
        shutil.chown(pwfile, user=run_as[2])
    data = root / "data"
    started = False
    try:
        initdb = ["-D", str(data), "-U", PG_USER, "-A", "scram-sha-256", "--pwfile", str(pwfile), "--no-sync"]
        locale = ["-E", "UTF8", "--locale", "C"]
        subprocess.run(
            [*run_as, str(bin_dir / "initdb"), *initdb, *locale], check=True, capture_output=True, timeout=60
        )
        for _attempt in range(3):
            port = _free_port()
            options = f"-h 127.0.0.1 -p {port} -k {root} -F -c max_connections=40"
            pg_ctl = ["-D", str(data), "-l", str(root / "log"), "-w", "-t", "30", "-o", options, "start"]
            start = subprocess.run(
                [*run_as, str(bin_dir / "pg_ctl"), *pg_ctl], capture_output=True, timeout=60
            )
            if start.returncode == 0:
                started = True
                break
        if not started:
            log = (root / "log").read_text(errors="replace")[-2000:] if (root / "log").exists() else ""
            pytest.fail(f"The test PostgreSQL server did not start:\n{log}", pytrace=False)
        yield PostgresServer(port=port, password_file=client_password)
    finally:
        if started:
            subprocess.run(
                [*run_as, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
                capture_output=True,
                timeout=60,
            )
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(client_password.parent, ignore_errors=True)


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


@dataclass
class StoreUnderTest:
    """Where a test's history lives, and a raw connection to look at it or tamper with it."""

    kind: str  # "sqlite" or "postgresql"
    where: str
    password_file: Path | None
    server: PostgresServer | None = None
    dbname: str | None = None

    def open(self, *, baseline_id: str = "run-1", window_kind: str = "month", **options: Any) -> History:
        return History.open(
            self.where,
            baseline_id=baseline_id,
            window_kind=window_kind,
            password_file=self.password_file,
            **options,
        )

    def connect(self) -> Any:
        """A raw connection in autocommit mode (statements with ``?`` placeholders via :meth:`sql`)."""
        if self.kind == "sqlite":
            import sqlite3

            return sqlite3.connect(self.where, isolation_level=None)
        assert self.server is not None and self.dbname is not None
        return self.server.admin(self.dbname)

    def sql(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        conn = self.connect()
        try:
            if self.kind == "postgresql":
                statement = statement.replace("?", "%s")
            cursor = conn.execute(statement, params)
            return [tuple(r) for r in cursor.fetchall()] if cursor.description else []
        finally:
            conn.close()

    def snapshot(self) -> object:
        """Everything the history holds (for a SQLite file, its bytes too): to show nothing changed."""
        tables = {
            name: sorted(self.sql(f"SELECT * FROM {name}"))
            for (name,) in self.sql(
                "SELECT name FROM sqlite_master WHERE type = 'table'"
                if self.kind == "sqlite"
                else "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
            )
        }
        if self.kind == "sqlite":
            return tables, Path(self.where).read_bytes()
        return tables


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreUnderTest:
    """A place for a new history: a SQLite file in a monitoring folder, or a new PostgreSQL database."""
    if request.param == "sqlite":
        folder = tmp_path / "monitoring"
        folder.mkdir()
        return StoreUnderTest("sqlite", str(folder / "history.sqlite"), None)
    server: PostgresServer = request.getfixturevalue("postgres")
    dbname = server.new_database()
    return StoreUnderTest("postgresql", server.url(dbname), server.password_file, server, dbname)
