"""Credentials for a PACS: from the environment or a file the protocol names, never from the protocol.

Environment: ``SITECAL_PACS_USERNAME`` and ``SITECAL_PACS_PASSWORD`` (HTTP basic), or
``SITECAL_PACS_TOKEN`` (a bearer token). File (``data.source.credentials_file``): YAML with ``username``
and ``password``, or ``token``; readable by its owner only (mode 600), like the pseudonym key. A file
given wins over the environment. The secrets are held in memory, passed to the HTTP session, and never
logged, written or shown (their ``repr`` hides them).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from sitecal.errors import DataError
from sitecal.protocol import TlsSettings

__all__ = ["Credentials", "load_credentials", "missing_tls_files"]

ENV_USERNAME = "SITECAL_PACS_USERNAME"
ENV_PASSWORD = "SITECAL_PACS_PASSWORD"
ENV_TOKEN = "SITECAL_PACS_TOKEN"


@dataclass(frozen=True)
class Credentials:
    """HTTP basic credentials or a bearer token (``where``: the file or the environment, for messages)."""

    where: str
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)


def load_credentials(path: Path | None, field: str = "data.source.credentials_file") -> Credentials | None:
    """The credentials of ``path`` (a YAML file, owner-only), else of the environment, else None.

    ``field``: the protocol field that named the file, for messages.
    """
    if path is not None:
        return _from_file(path, field)
    env = os.environ
    if env.get(ENV_TOKEN):
        return Credentials("environment (SITECAL_PACS_TOKEN)", token=env[ENV_TOKEN])
    if env.get(ENV_USERNAME) or env.get(ENV_PASSWORD):
        if not (env.get(ENV_USERNAME) and env.get(ENV_PASSWORD)):
            raise DataError(
                f"set both {ENV_USERNAME} and {ENV_PASSWORD} (HTTP basic credentials of the PACS), or "
                f"{ENV_TOKEN} (a bearer token)"
            )
        return Credentials(
            f"environment ({ENV_USERNAME})", username=env[ENV_USERNAME], password=env[ENV_PASSWORD]
        )
    return None


def _from_file(path: Path, field: str) -> Credentials:
    where = f"{field} {path}"
    try:
        mode = path.stat().st_mode
        if not stat.S_ISREG(mode):
            raise DataError(f"{where}: not a regular file.")
        if mode & 0o077:
            raise DataError(
                f"{where}: readable by others (mode {stat.S_IMODE(mode):o}); it holds the PACS password: "
                f"run `chmod 600 {path}`."
            )
        if path.stat().st_size > 64 * 1024:
            raise DataError(f"{where}: larger than 64 KiB; it should hold a username and a password.")
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{where}: not found.") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise DataError(f"{where}: cannot be read as YAML ({type(exc).__name__}).") from None
    if not isinstance(data, dict) or set(data) - {"username", "password", "token"}:
        raise DataError(f"{where}: give 'username' and 'password', or 'token' (and nothing else).")
    values = {k: str(v) for k, v in data.items() if v is not None}
    if "token" in values and len(values) == 1:
        return Credentials(where, token=values["token"])
    if set(values) == {"username", "password"}:
        return Credentials(where, username=values["username"], password=values["password"])
    raise DataError(f"{where}: give 'username' and 'password', or 'token' (and nothing else).")


def missing_tls_files(tls: TlsSettings | None, resolve: Callable[[str], Path], field: str) -> list[str]:
    """One line per TLS file the settings name that does not exist (``field``: e.g. ``data.source``)."""
    problems = []
    for name in ("ca_file", "cert_file", "key_file"):
        value = None if tls is None else getattr(tls, name)
        if value is not None and not resolve(value).is_file():
            problems.append(f"{field}.tls.{name}: file not found: {resolve(value)}")
    return problems
