"""Pseudonymisation: identifiers become keyed hashes that never leave the run in clear.

A key is ``HMAC-SHA256(site secret, kind + NUL + identifier)``, shortened to 16 hex digits and prefixed by
its kind (``P-`` patient, ``S-`` study, ``I-`` instance, ``R-`` series, ``F-`` file path part). The site
secret lives in a key file that sitecal creates (64 hexadecimal digits and a newline, mode 0600) so that
keys are stable across runs at one site and cannot be reversed or recomputed by anyone without that file.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePath

from sitecal._io import unwritable_folder
from sitecal.errors import OutputError

__all__ = [
    "KEPT_SUFFIXES",
    "Pseudonymizer",
    "create_network_key",
    "key_file_problem",
    "load_network_key",
    "load_or_create_key",
    "network_key_problem",
    "read_key",
]

_PREFIX = {"patient": "P", "study": "S", "instance": "I", "path": "F", "series": "R"}
# HMAC-SHA256 (RFC 2104): the key, padded to SHA-256's block, XOR 0x36 inside and 0x5C outside
_BLOCK = 64
_INNER = bytes(x ^ 0x36 for x in range(256))
_OUTER = bytes(x ^ 0x5C for x in range(256))

#: File name endings written in clear after a path part's pseudonym (compared ignoring case): they say
#: what a file is and nothing about whom. Any other ending is hashed with the rest of the name, since a
#: site may write anything after a dot (``DOE^JANE.19650304``).
KEPT_SUFFIXES = (".dcm", ".dicom", ".dic", ".ima")

# What load_or_create_key writes: 32 random bytes as 64 lower-case hex digits, then a newline (accepted
# without it, as some editors save). Anything else was not made by sitecal.
_KEY_TEXT = re.compile(rb"[0-9a-f]{64}\n?")
_KEY_FILE_MAX = 4096  # read no further: a key file is 65 bytes
_HOW_TO_CREATE = (
    "Point privacy.key_file at a key that sitecal created, or at a path that does not exist yet "
    "(sitecal then creates a key there, readable by its owner only)."
)


def load_or_create_key(path: Path) -> bytes:
    """Read the site secret from ``path``, creating a random one there if the file does not exist.

    Parameters
    ----------
    path : Path
        The key file (``privacy.key_file``).

    Returns
    -------
    bytes
        The secret: the 64 hexadecimal digits of the file (the HMAC key of :class:`Pseudonymizer`).

    Raises
    ------
    OutputError
        When the key cannot be created or read, when ``path`` is not a regular file, when the file is not
        a key sitecal wrote (64 hexadecimal digits and a newline) or when its group or other users may read
        or write it (it must be mode 0600). Each message says how to fix it.
    """
    try:
        return _read_key(path)
    except FileNotFoundError:
        pass
    _create_key(path)
    return _read_key(path)


def read_key(path: Path) -> bytes:
    """The key in ``path`` (a site's or a network's), read only: never created, to check a seal with.

    Raises
    ------
    FileNotFoundError
        No file there.
    OutputError
        Not a key sitecal wrote, or readable by others (:func:`load_or_create_key`'s rules).
    """
    return _read_key(path)


def key_file_problem(path: Path) -> str | None:
    """Why ``path`` cannot serve as the site key, or ``None``; creates nothing (``sitecal check``).

    An existing file must be a key sitecal wrote, mode 0600 (:func:`load_or_create_key`'s rules); a missing
    one must be creatable, below a folder that is writable or can be made.
    """
    try:
        _read_key(path)
    except FileNotFoundError:
        problem = unwritable_folder(path.parent)
        return f"{path}: the key cannot be created there ({problem})." if problem else None
    except OutputError as exc:
        return str(exc)
    return None


#: How a network's sites come to share a key.
_NETWORK_KEY_HOW = (
    "A network's sites pseudonymise under one key: its coordinator creates it once with 'sitecal "
    "network-key FILE' and gives each site a copy (mode 0600) through a channel the network trusts."
)


def load_network_key(path: Path) -> bytes:
    """The network's shared key (``privacy.network_key_file``): read, never created here.

    Each site creating its own would give every site other pseudonyms, and parts that cannot be joined.
    """
    try:
        return _read_key(path)
    except FileNotFoundError:
        raise OutputError(
            f"{path}: the network key (privacy.network_key_file) is not there. {_NETWORK_KEY_HOW}"
        ) from None
    except OutputError as exc:
        raise OutputError(f"privacy.network_key_file: {exc}") from None


def network_key_problem(path: Path) -> str | None:
    """Why ``path`` cannot serve as the network key, or ``None`` (``sitecal check``)."""
    try:
        load_network_key(path)
    except OutputError as exc:
        return str(exc)
    return None


def create_network_key(path: Path) -> None:
    """Write a new random key at ``path`` (mode 0600) for a network's sites; refuse to replace a file."""
    if path.exists() or path.is_symlink():
        raise OutputError(
            f"{path}: a file is already there; a network key is never overwritten. {_NETWORK_KEY_HOW}"
        )
    _create_key(path)
    _read_key(path)


def _create_key(path: Path) -> None:
    """Write a new key at ``path`` unless one appears there meanwhile (another run created it first)."""
    tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(secrets.token_hex(32).encode() + b"\n")
                fh.flush()
                os.fsync(fh.fileno())
            # a hard link appears whole or not at all, and fails if a key exists: a concurrent run never
            # reads a half-written key, and an existing key is never replaced
            os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
    except OSError as exc:
        raise OutputError(
            f"{path}: cannot create the pseudonymisation key ({exc.strerror or exc}). "
            "Set privacy.key_file in the protocol to a writable location."
        ) from None


def _read_key(path: Path) -> bytes:
    """The key in ``path``, after checking that it is a private regular file that sitecal wrote."""
    try:
        # O_NONBLOCK: a FIFO named like the key must not block the run; it is refused below
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise OutputError(
            f"{path}: cannot read the pseudonymisation key ({exc.strerror or exc}). {_HOW_TO_CREATE}"
        ) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OutputError(f"{path}: the pseudonymisation key is not a regular file. {_HOW_TO_CREATE}")
        data = os.read(fd, _KEY_FILE_MAX)
    finally:
        os.close(fd)
    # the content first: 'chmod 600' is the wrong advice for a file that is no key (/etc/passwd)
    if not _KEY_TEXT.fullmatch(data):
        raise OutputError(
            f"{path}: not a pseudonymisation key created by sitecal (one holds 64 hexadecimal digits and a "
            f"newline; this file holds {len(data)}{'+' if len(data) == _KEY_FILE_MAX else ''} bytes of "
            f"something else). {_HOW_TO_CREATE}"
        )
    if os.name == "posix" and info.st_mode & 0o077:
        raise OutputError(
            f"{path}: the pseudonymisation key may be read or changed by other users (mode "
            f"{stat.S_IMODE(info.st_mode):04o}); anyone who reads it can recompute every pseudonym. "
            f"Make it private with 'chmod 600 {path}'."
        )
    return data.rstrip(b"\n")


@dataclass(frozen=True)
class Pseudonymizer:
    """Keyed hash of identifiers; ``repr`` never shows the key."""

    key: bytes = field(repr=False)

    def __call__(self, kind: str, value: str) -> str:
        """The pseudonym of ``value`` as a ``kind`` identifier (patient, study, instance, series, path)."""
        # the first 8 bytes of the hash are its first 16 hex digits
        return f"{_PREFIX[kind]}-{self._hash(kind, value)[:8].hex()}"

    def digest(self, kind: str, value: str) -> str:
        """The full keyed hash (64 hex digits) behind :meth:`__call__`, where 16 digits are too few."""
        return self._hash(kind, value).hex()

    def many(self, kind: str, values: Iterable[str]) -> list[str]:
        """The pseudonyms of ``values`` as ``kind`` identifiers, each as :meth:`__call__` gives it.

        For a million keys: the key's HMAC pads are hashed once (RFC 2104), not once per value, which
        halves the time per value.

        Examples
        --------
        >>> p = Pseudonymizer(b"k" * 64)
        >>> p.many("study", ["1.2.3", "1.2.4"]) == [p("study", "1.2.3"), p("study", "1.2.4")]
        True
        """
        prefix, head = f"{_PREFIX[kind]}-", f"{kind}\0"
        key = self.key if len(self.key) <= _BLOCK else hashlib.sha256(self.key).digest()
        key = key.ljust(_BLOCK, b"\0")
        inner, outer = hashlib.sha256(key.translate(_INNER)), hashlib.sha256(key.translate(_OUTER))
        out = []
        for value in values:
            h = inner.copy()
            h.update((head + value).encode("utf-8", "surrogateescape"))
            o = outer.copy()
            o.update(h.digest())
            out.append(prefix + o.digest()[:8].hex())
        return out

    def _hash(self, kind: str, value: str) -> bytes:
        # surrogateescape: a file name that is not UTF-8 (os.fsdecode's lone surrogates) hashes as its bytes
        data = f"{kind}\0{value}".encode("utf-8", "surrogateescape")
        # hmac.digest: the one-shot HMAC (OpenSSL's where there is one), the same bytes as hmac.new's
        return hmac.digest(self.key, data, "sha256")

    @property
    def fingerprint(self) -> str:
        """A short, non-reversible name of the key, recorded in provenance.

        Pseudonyms in the run's tables match another run's exactly when both used the same key; this says
        which key a run used without revealing it. (No number depends on a site key, see
        :mod:`sitecal._split_key`; under a network's shared key the split follows the network pseudonyms.)
        """
        return hmac.new(self.key, b"sitecal key fingerprint", hashlib.sha256).hexdigest()[:16]

    def path(self, relative: PurePath) -> str:
        """``relative`` with every part pseudonymised: ``F-<16 hex>`` per part, ``/`` between parts.

        Sites name folders and files by patient name, birth date, MRN, accession number or UID
        (``DOE^JANE_19650304/MRN7777777/ACC99999999_report.dcm``), and no filter can tell every such name
        from a harmless one, so no part is written in clear. A part's pseudonym is the keyed hash of the
        path up to and including it: the same folder always gets the same pseudonym (rows can still be
        grouped by folder), two folders of the same name under different parents get different ones.
        A last part ending in one of :data:`KEPT_SUFFIXES` keeps that ending.

        Examples
        --------
        >>> from pathlib import PurePosixPath
        >>> p = Pseudonymizer(b"k" * 32)
        >>> written = p.path(PurePosixPath("DOE^JANE_19650304/MRN7777777/ACC99999999_report.dcm"))
        >>> [len(part) for part in written.split("/")], written.endswith(".dcm")
        ([18, 18, 22], True)
        """
        parts = relative.parts
        if not parts:  # the DICOM folder itself (a series whose files lie at its top)
            return "."
        written = []
        for i, part in enumerate(parts):
            prefix = "/".join(parts[: i + 1])
            suffix = next(
                (part[-len(s) :] for s in KEPT_SUFFIXES if i == len(parts) - 1 and part.lower().endswith(s)),
                "",
            )
            written.append(self("path", prefix) + suffix)
        return "/".join(written)
