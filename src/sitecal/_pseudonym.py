"""Pseudonymisation: identifiers become keyed hashes that never leave the run in clear.

A key is ``HMAC-SHA256(site secret, kind + NUL + identifier)``, shortened to 16 hex digits and prefixed by
its kind (``P-`` patient, ``S-`` study, ``I-`` instance, ``F-`` file path part). The site secret lives in a
key file (created with mode 0600 on first use) so that keys are stable across runs at one site and cannot
be reversed or recomputed by anyone without that file.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from sitecal.errors import OutputError

__all__ = ["Pseudonymizer", "load_or_create_key"]

_PREFIX = {"patient": "P", "study": "S", "instance": "I", "path": "F", "series": "R"}
_UID_LIKE = re.compile(r"^\d+(\.\d+){3,}$")


def load_or_create_key(path: Path) -> bytes:
    """Read the site secret from ``path``, creating a random 32-byte one if the file does not exist."""
    try:
        data = path.read_bytes().strip()
    except FileNotFoundError:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            data = secrets.token_hex(32).encode()
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data + b"\n")
        except FileExistsError:  # created concurrently by another run
            data = path.read_bytes().strip()
        except OSError as exc:
            raise OutputError(
                f"{path}: cannot create the pseudonymisation key ({exc.strerror}). "
                "Set privacy.key_file in the protocol to a writable location."
            ) from None
    except OSError as exc:
        raise OutputError(f"{path}: cannot read the pseudonymisation key ({exc.strerror}).") from None
    if len(data) < 32:
        raise OutputError(f"{path}: the pseudonymisation key is shorter than 32 characters. Replace it.")
    return data


@dataclass(frozen=True)
class Pseudonymizer:
    """Keyed hash of identifiers; ``repr`` never shows the key."""

    key: bytes = field(repr=False)

    def __call__(self, kind: str, value: str) -> str:
        """The pseudonym of ``value`` as a ``kind`` identifier (patient, study, instance, series, path)."""
        return f"{_PREFIX[kind]}-{self.digest(kind, value)[:16]}"

    def digest(self, kind: str, value: str) -> str:
        """The full keyed hash (64 hex digits) behind :meth:`__call__`, where 16 digits are too few."""
        return hmac.new(self.key, f"{kind}\0{value}".encode(), hashlib.sha256).hexdigest()

    @property
    def fingerprint(self) -> str:
        """A short, non-reversible name of the key, recorded in provenance.

        The patient split is seeded over pseudonymised keys, so two runs give the same split exactly when they
        share the seed and the key; this says which key a run used without revealing it.
        """
        return hmac.new(self.key, b"sitecal key fingerprint", hashlib.sha256).hexdigest()[:16]

    def path(self, relative: Path, identifiers: Iterable[str] = ()) -> str:
        """``relative`` with each part that is UID-like or contains one of ``identifiers`` pseudonymised.

        Exports often name folders by PatientID or files by SOPInstanceUID; such parts are replaced by
        their pseudonym (keeping a ``.dcm`` suffix) so a path can be written to the run folder.
        """
        needles = [value for value in identifiers if len(value) >= 3]
        parts = []
        for part in relative.parts:
            stem, suffix = (part[:-4], part[-4:]) if part.lower().endswith(".dcm") else (part, "")
            if _UID_LIKE.match(stem) or any(needle in part for needle in needles):
                parts.append(self("path", stem) + suffix)
            else:
                parts.append(part)
        return "/".join(parts)
