"""The seal of a run folder: what the run wrote, keyed under the site key, checked before any use.

A run folder is evidence: a committee reads its report, a deployment loads its ``calibration.json``, an
archive receives its ``report.dcm``. Anyone with write access to the folder could change any of them, and a
plain list of sha256s can be recomputed by whoever edits the files. So the run seals the folder:
``seal.json`` lists the sha256 and size of every file the run wrote and carries a MAC over that list,

    ``mac = HMAC-SHA256(seal key, canonical JSON of the seal without "mac")``,
    ``seal key = HMAC-SHA256(site key, "sitecal run-folder seal v1")``,

where the site key is the pseudonymisation key (``privacy.key_file``; a network's shared key for a network
run). Every command that reads a run folder (``report``, ``export``, ``apply``, ``send``, ``plan
--from-run``) calls :func:`verify_seal` first and refuses the folder, naming the file, when a sealed file
was edited or is missing, when a file was added, or when ``seal.json`` itself was edited.

Why a keyed hash and not a signature: the commands that read a run folder run at the site, where the key
already is (it made every pseudonym of the run), so an HMAC needs no new key, no key pair to manage and no
cryptography library. The price: whoever holds the site key can also forge a seal, and a reader outside the
site cannot check it (``sitecal apply --unverified`` says so in its output). A site that must prove a
folder to outsiders should archive it with a signature of its own as well.

What is sealed, and what may change after
-----------------------------------------
- every regular file under the folder when the seal is written, except those below;
- ``run.log`` by its first ``bytes`` bytes (later commands append their lines; the sealed part may not
  change);
- not sealed: ``sent.json`` (the record of ``sitecal send``) and the ``export/`` folder (what ``sitecal
  export`` wrote), both written after the run; nothing reads them as evidence;
- ``INCOMPLETE``: the marker of a folder whose run has not finished; written when the folder is made, removed
  when the run's last seal is written.

Stages
------
A run seals twice: once its results are written (``state: "evaluated"``: tables, predictions,
``calibration.json``, ``evaluation.json``, provenance, the protocol) and again after the report
(``state: "complete"``). A folder left ``evaluated`` (killed while rendering) is incomplete: only ``sitecal
report`` takes it, and its own seal then completes it. A folder with no seal (killed before its results)
is refused by every command.

Verifying by hand
-----------------
>>> import hashlib, hmac, json                                           # doctest: +SKIP
>>> key = open(".sitecal-pseudonym-key", "rb").read().strip()            # doctest: +SKIP
>>> seal = json.load(open("seal.json"))                                  # doctest: +SKIP
>>> mac = seal.pop("mac")                                                # doctest: +SKIP
>>> body = json.dumps(seal, sort_keys=True, separators=(",", ":")).encode()  # doctest: +SKIP
>>> k = hmac.digest(key, b"sitecal run-folder seal v1", "sha256")        # doctest: +SKIP
>>> hmac.compare_digest(hmac.digest(k, body, "sha256").hex(), mac)       # doctest: +SKIP
True

then ``sha256sum`` each file of ``seal["files"]`` (and ``head -c BYTES run.log | sha256sum``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Final, Literal

from sitecal._io import read_json, write_text_atomic
from sitecal.errors import DataError, SealError

__all__ = [
    "COMPLETE",
    "EVALUATED",
    "INCOMPLETE",
    "SEAL",
    "Seal",
    "key_fingerprint",
    "mark_incomplete",
    "read_seal",
    "reseal",
    "verify_seal",
    "write_seal",
]

#: The seal's file name in the run folder.
SEAL = "seal.json"
#: The marker of a run folder whose run has not finished (interrupted, failed or still running).
INCOMPLETE = "INCOMPLETE"
#: The run log: sealed by its first bytes, since later commands append to it.
RUN_LOG = "run.log"
#: Written after the run by other commands, never read as evidence: not sealed.
UNSEALED_FILES = frozenset({"sent.json"})
UNSEALED_FOLDERS = frozenset({"export"})

State = Literal["evaluated", "complete"]
EVALUATED: Final[State] = "evaluated"
COMPLETE: Final[State] = "complete"

_FORMAT = "sitecal run-folder seal"
_VERSION = 1
_SEAL_KEY_LABEL = b"sitecal run-folder seal v1"
#: Bounds of a seal read back: a run folder holds some tens of files.
_MAX_SEAL_BYTES = 1 << 20
_MAX_FILES = 10_000
_CHUNK = 1 << 20


def key_fingerprint(key: bytes) -> str:
    """The key's short public name, as provenance records it (``Pseudonymizer.fingerprint``)."""
    return hmac.new(key, b"sitecal key fingerprint", hashlib.sha256).hexdigest()[:16]


@dataclass(frozen=True)
class Seal:
    """A verified seal: the folder, its state and the sha256 of each sealed file (POSIX relative paths)."""

    folder: Path
    state: State
    files: Mapping[str, str]
    sizes: Mapping[str, int]
    key_fingerprint: str

    def read_bytes(self, name: str) -> bytes:
        """The bytes of sealed file ``name``, read once and checked against the seal (no gap to edit in)."""
        expected = self.files.get(name)
        if expected is None:
            raise SealError(f"{self.folder / name}: not a file of the run's seal. Give a folder a run wrote.")
        try:
            data = (self.folder / name).read_bytes()
        except OSError as exc:
            raise SealError(f"{self.folder / name}: cannot read it ({exc.strerror or exc}).") from None
        if not hmac.compare_digest(hashlib.sha256(data).hexdigest(), expected):
            raise SealError(_edited(self.folder / name))
        return data


def mark_incomplete(folder: Path, why: str) -> None:
    """Write (or rewrite) the ``INCOMPLETE`` marker with the reason; never fails the caller."""
    try:
        write_text_atomic(
            folder / INCOMPLETE,
            f"This run folder is incomplete: {why}\nIts results are not sealed and no sitecal command but "
            "'sitecal report' (on a sealed evaluation) will use it. Run the protocol again.\n",
        )
    except OSError:  # a full disk or a removed folder: the missing seal already says incomplete
        pass


def write_seal(folder: Path, key: bytes, *, state: State) -> Seal:
    """Hash every file of ``folder`` (but ``seal.json``, the marker and the unsealed ones) and seal them.

    An ``evaluated`` seal leaves out the report's files (``report.*``, ``figures/``), which are not yet
    written or are being written again. With ``state="complete"`` the ``INCOMPLETE`` marker is removed
    after the seal is written.
    """
    return _seal_files(folder, key, state=state, kept=None)


def reseal(seal: Seal, key: bytes, *, state: State) -> Seal:
    """Seal ``seal``'s folder again as ``state``, keeping the verified hashes of what it sealed.

    The files ``seal`` verified (but the report's) keep the hashes verified, never read again, so that a
    file edited since its check cannot slip into the new seal; the report's files are hashed now when
    ``state`` is ``complete`` (they were just rendered from the verified ones) and left out when it is
    ``evaluated``. ``sitecal report`` goes through here on either side of rendering.
    """
    kept = {name: (digest, seal.sizes[name]) for name, digest in seal.files.items() if not _rendered(name)}
    return _seal_files(seal.folder, key, state=state, kept=kept)


def _seal_files(
    folder: Path, key: bytes, *, state: State, kept: Mapping[str, tuple[str, int]] | None
) -> Seal:
    """Write the seal of ``folder``.

    With ``kept``, those files' (hash, size) are taken as given and only the report's files are read;
    any other file found is left out, to be refused as added by the next check.
    """
    files: dict[str, str] = {}
    sizes: dict[str, int] = {}
    growing: dict[str, dict[str, Any]] = {}
    for name, path in _walk(folder):
        if name in (SEAL, INCOMPLETE) or _unsealed(name) or (state == EVALUATED and _rendered(name)):
            continue
        if name == RUN_LOG:
            size = path.stat().st_size
            growing[name] = {"bytes": size, "sha256": _sha256(path, limit=size)}
        elif kept is None or _rendered(name):
            sizes[name] = path.stat().st_size
            files[name] = _sha256(path)
    for name, (digest, size) in (kept or {}).items():
        files[name], sizes[name] = digest, size
    body: dict[str, Any] = {
        "format": _FORMAT,
        "version": _VERSION,
        "state": state,
        "algorithm": "HMAC-SHA256",
        "key_fingerprint": key_fingerprint(key),
        "files": dict(sorted(files.items())),
        "sizes": dict(sorted(sizes.items())),
        "growing": growing,
    }
    write_text_atomic(
        folder / SEAL, json.dumps({**body, "mac": _mac(key, body)}, indent=2, sort_keys=True) + "\n"
    )
    if state == COMPLETE:
        (folder / INCOMPLETE).unlink(missing_ok=True)
    return Seal(folder=folder, state=state, files=files, sizes=sizes, key_fingerprint=body["key_fingerprint"])


def read_seal(folder: Path) -> dict[str, Any]:
    """The seal of ``folder`` as stored, unverified (to learn which key it names); bounded and checked."""
    path = folder / SEAL
    if not folder.is_dir():
        raise SealError(f"{folder}: not a folder. Give a run folder (reports/<name>-<UTC time>).")
    if not path.is_file() or path.is_symlink():
        if (folder / INCOMPLETE).exists():
            raise SealError(
                f"{folder}: an incomplete run folder (the run was interrupted or failed before its results "
                f"were sealed; {folder / INCOMPLETE} and run.log say why). Run the protocol again."
            )
        raise SealError(
            f"{path}: not found. {folder} is not a sealed sitecal run folder (a run older than the seal, or "
            "not a run folder): run the protocol again to get one whose files can be verified."
        )
    try:  # the project's bounded reader: a regular file, its size, its depth before parsing
        seal = read_json(path, max_bytes=_MAX_SEAL_BYTES, max_depth=4, remedy="Was the seal edited?")
    except DataError as exc:
        raise SealError(str(exc)) from None
    if not _well_formed(seal):
        raise SealError(f"{path}: not a seal sitecal wrote (its fields are not a seal's). Was it edited?")
    return dict(seal)


def verify_seal(folder: Path, key: bytes, *, need: State = COMPLETE) -> Seal:
    """Check ``folder`` against its seal under ``key``: the verified seal, or a :class:`SealError`.

    Parameters
    ----------
    folder : pathlib.Path
        The run folder.
    key : bytes
        The site key (``privacy.key_file``) the run used.
    need : {"complete", "evaluated"}
        ``complete``: the whole run, report included (``export``, ``apply``, ``send``, ``plan``);
        ``evaluated``: its sealed results suffice, the report files may be absent or unsealed (``report``,
        which renders them again).

    Raises
    ------
    SealError
        The folder is incomplete, ``seal.json`` was edited or made under another key, a sealed file was
        edited or is missing, or a file was added; the message names the file.
    """
    seal = read_seal(folder)
    body = {k: v for k, v in seal.items() if k != "mac"}
    if seal["key_fingerprint"] != key_fingerprint(key):
        raise SealError(
            f"{folder / SEAL}: sealed under the key with fingerprint {seal['key_fingerprint']}, not under "
            f"the key given (fingerprint {key_fingerprint(key)}). Give the site key the run used (--key)."
        )
    if not hmac.compare_digest(str(seal["mac"]), _mac(key, body)):
        raise SealError(
            f"{folder / SEAL}: its MAC does not match its content: the seal was edited. The folder cannot "
            "be trusted: run the protocol again, or restore the folder from its archive."
        )
    state: State = seal["state"]
    if need == COMPLETE and state != COMPLETE:
        raise SealError(
            f"{folder}: an incomplete run folder (its results are sealed but its report was not finished: "
            f"see {folder / INCOMPLETE} and run.log). Finish it with 'sitecal report {folder}', or run the "
            "protocol again."
        )
    files: dict[str, str] = seal["files"]
    for name, digest in files.items():
        path = folder / name
        if not path.is_file() or path.is_symlink():
            raise SealError(f"{path}: missing (it is in the run's seal). Restore the folder the run wrote.")
        # the size first: a file swapped for a huge one is refused without reading it
        if path.stat().st_size != seal["sizes"][name] or not hmac.compare_digest(_sha256(path), digest):
            raise SealError(_edited(path))
    for name, grown in seal["growing"].items():
        path = folder / name
        if not path.is_file() or path.stat().st_size < grown["bytes"]:
            raise SealError(f"{path}: missing or shortened (its first {grown['bytes']} bytes are sealed).")
        if not hmac.compare_digest(_sha256(path, limit=grown["bytes"]), grown["sha256"]):
            raise SealError(_edited(path, what=f"its first {grown['bytes']} bytes were"))
    for name, path in _walk(folder):
        if name in files or name in seal["growing"] or name == SEAL or _unsealed(name):
            continue
        if name == INCOMPLETE and state != COMPLETE:
            continue
        if need == EVALUATED and state == EVALUATED and _rendered(name):
            continue  # what the interrupted rendering left; 'sitecal report' writes it again
        raise SealError(
            f"{path}: not in the run's seal: added to the folder after the run. Remove it (or restore the "
            "folder the run wrote)."
        )
    return Seal(
        folder=folder,
        state=state,
        files=files,
        sizes=seal["sizes"],
        key_fingerprint=seal["key_fingerprint"],
    )


def _rendered(name: str) -> bool:
    """Whether ``name`` is an output of rendering (``report.*``, ``figures/``).

    An evaluated folder may hold them unsealed: ``sitecal report`` writes them again.
    """
    return name.startswith(("report.", "figures/"))


def _edited(path: Path, *, what: str = "it was") -> str:
    return (
        f"{path}: edited after the run sealed it ({what} changed). The run's results cannot be trusted from "
        "this folder: restore it from its archive, or run the protocol again."
    )


def _unsealed(name: str) -> bool:
    parts = PurePosixPath(name).parts
    return name in UNSEALED_FILES or (len(parts) > 1 and parts[0] in UNSEALED_FOLDERS)


def _walk(folder: Path) -> Iterable[tuple[str, Path]]:
    """Every entry under ``folder`` as (POSIX relative name, path), sorted; a link or special file refused."""
    count = 0
    stack = [folder]
    found: list[tuple[str, Path]] = []
    while stack:
        current = stack.pop()
        try:
            entries = sorted(os.scandir(current), key=lambda e: e.name)
        except OSError as exc:
            raise SealError(f"{current}: cannot list it ({exc.strerror or exc}).") from None
        for entry in entries:
            count += 1
            if count > _MAX_FILES:
                raise SealError(f"{folder}: more than {_MAX_FILES} entries: not a folder a run wrote.")
            path = Path(entry.path)
            name = path.relative_to(folder).as_posix()
            mode = entry.stat(follow_symlinks=False).st_mode
            if stat.S_ISDIR(mode):
                if name in UNSEALED_FOLDERS:
                    continue
                stack.append(path)
            elif stat.S_ISREG(mode):
                found.append((name, path))
            else:
                raise SealError(
                    f"{path}: a link or special file in a run folder (a run writes regular files only). "
                    "Remove it."
                )
    return sorted(found)


def _sha256(path: Path, *, limit: int | None = None) -> str:
    digest = hashlib.sha256()
    left = limit
    try:
        with path.open("rb") as fh:
            while left is None or left > 0:
                chunk = fh.read(_CHUNK if left is None else min(_CHUNK, left))
                if not chunk:
                    break
                digest.update(chunk)
                if left is not None:
                    left -= len(chunk)
    except OSError as exc:
        raise SealError(f"{path}: cannot read it ({exc.strerror or exc}).") from None
    return digest.hexdigest()


def _mac(key: bytes, body: Mapping[str, Any]) -> str:
    seal_key = hmac.digest(key, _SEAL_KEY_LABEL, "sha256")
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
    return hmac.digest(seal_key, text, "sha256").hex()


_HEX64 = frozenset("0123456789abcdef")


def _is_sha256(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 64 and set(value) <= _HEX64


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _safe_name(name: Any) -> bool:
    """A relative POSIX path inside the folder: no absolute path, no ``..``, no empty part."""
    if not isinstance(name, str) or not name or name.startswith("/") or "\\" in name or "\0" in name:
        return False
    return all(part not in ("", ".", "..") for part in name.split("/"))


def _well_formed(seal: Any) -> bool:
    if not isinstance(seal, dict) or set(seal) != {
        "format",
        "version",
        "state",
        "algorithm",
        "key_fingerprint",
        "files",
        "sizes",
        "growing",
        "mac",
    }:
        return False
    files, sizes, growing = seal["files"], seal["sizes"], seal["growing"]
    return (
        seal["format"] == _FORMAT
        and seal["version"] == _VERSION
        and seal["state"] in (EVALUATED, COMPLETE)
        and seal["algorithm"] == "HMAC-SHA256"
        and isinstance(seal["key_fingerprint"], str)
        and len(seal["key_fingerprint"]) == 16
        and isinstance(seal["mac"], str)
        and isinstance(files, dict)
        and len(files) <= _MAX_FILES
        and all(_safe_name(k) and _is_sha256(v) for k, v in files.items())
        and isinstance(sizes, dict)
        and set(sizes) == set(files)
        and all(_is_count(v) for v in sizes.values())
        and isinstance(growing, dict)
        and set(growing) <= {RUN_LOG}
        and all(
            isinstance(g, dict)
            and set(g) == {"bytes", "sha256"}
            and _is_count(g["bytes"])
            and _is_sha256(g["sha256"])
            for g in growing.values()
        )
    )
