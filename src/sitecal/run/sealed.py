"""Open a run folder as evidence: find the key the run sealed it under, then verify every file.

Every command that reads a run folder (``sitecal report``, ``export``, ``apply``, ``send``, ``plan
--from-run``) starts with :func:`open_run`. The seal itself is :mod:`sitecal._seal`.

Which key
---------
The seal names its key by fingerprint (the one provenance records). :func:`open_run` reads, never
creates, the key files it can find, in this order, and takes the one with that fingerprint:

1. ``key_file`` (``--key``), when given: only that one;
2. the ``privacy.key_file`` (or ``network_key_file``) of ``protocol`` (``--protocol``), else of the run's
   own ``protocol.yaml``, its relative path taken from the protocol's folder that the run recorded
   (``resolved.json``, checked against the seal's list; :mod:`sitecal.run._resolved`);
3. ``<folder>/../.sitecal-pseudonym-key``: where a run keeps the site key when the protocol names none
   (the run folder's parent is the protocol's ``report.output_dir``).

No key at hand is an error that says to pass ``--key``: a folder is never taken unverified, but by
``sitecal apply --unverified``, whose output records it.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from pathlib import Path

from sitecal._pseudonym import read_key
from sitecal._seal import COMPLETE, SEAL, Seal, State, key_fingerprint, read_seal, verify_seal
from sitecal.errors import SealError, SitecalError

__all__ = ["DEFAULT_KEY_NAME", "open_run", "run_key"]

logger = logging.getLogger(__name__)

#: The site key's file in ``report.output_dir`` when the protocol names no ``privacy.key_file``.
DEFAULT_KEY_NAME = ".sitecal-pseudonym-key"


def open_run(
    folder: Path,
    *,
    key_file: Path | None = None,
    protocol: Path | None = None,
    need: State = COMPLETE,
) -> Seal:
    """Verify ``folder`` against its seal; the verified :class:`~sitecal._seal.Seal`.

    Raises
    ------
    SealError
        An incomplete, unsealed or edited folder, or no key at hand with the seal's fingerprint (each
        message names the file, or says which keys were tried and to pass ``--key``).
    """
    folder = Path(folder)
    return verify_seal(folder, run_key(folder, key_file=key_file, protocol=protocol), need=need)


def run_key(folder: Path, *, key_file: Path | None = None, protocol: Path | None = None) -> bytes:
    """The key ``folder``'s seal was made under, from the places the module docstring lists."""
    wanted = str(read_seal(folder)["key_fingerprint"])
    candidates = [key_file] if key_file is not None else _candidates(folder, protocol)
    tried: list[str] = []
    for path in candidates:
        try:
            key = read_key(path)
        except FileNotFoundError:
            tried.append(f"{path} (not there)")
            continue
        except SitecalError as exc:
            tried.append(f"{path} ({exc})")
            continue
        if key_fingerprint(key) == wanted:
            return key
        tried.append(f"{path} (another key: fingerprint {key_fingerprint(key)})")
    raise SealError(
        f"{folder / SEAL}: sealed under the key with fingerprint {wanted}, and no key at hand has it (tried: "
        f"{'; '.join(tried) or 'nothing'}). Pass --key with the site key the run used (privacy.key_file, "
        f"by default {DEFAULT_KEY_NAME} in report.output_dir)."
    )


def _candidates(folder: Path, protocol: Path | None) -> list[Path]:
    """The key files to try: the protocol's (``protocol``, else the run's own), then the default place."""
    from sitecal.run._resolved import read_resolved, run_protocol_of

    found: list[Path] = []
    if protocol is None and not _check_run_protocol(folder):
        return [folder.resolve().parent / DEFAULT_KEY_NAME]
    if protocol is None:
        read_resolved(folder)  # an edited or malformed record is named here, never stepped around
    try:
        found.append(run_protocol_of(folder, protocol).key_file)
    except SitecalError as exc:  # the folder's protocol cannot be found back: the default place remains
        logger.debug("no key from the run's protocol: %s", exc)
    default = folder.resolve().parent / DEFAULT_KEY_NAME
    if default not in found:
        found.append(default)
    return found


def _check_run_protocol(folder: Path) -> bool:
    """Whether the folder has a ``protocol.yaml`` to find the key from; refuse one its seal does not list.

    The seal is not verified yet (its key is what is being looked for), but a protocol that differs
    from it means an edited folder either way, and its key file must not be taken from it.
    """
    listed = read_seal(folder)["files"].get("protocol.yaml")
    path = folder / "protocol.yaml"
    if listed is None and not path.exists() and not path.is_symlink():
        return False  # no protocol in this folder (nor in its seal): the key is looked for beside it
    try:
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
    except OSError:
        digest = None
    if listed is None or digest is None or not hmac.compare_digest(digest, listed):
        raise SealError(
            f"{path}: missing, or edited after the run sealed it (not the protocol its seal lists), so the "
            "key it names cannot be trusted either. Restore the folder from its archive, or run the "
            "protocol again."
        )
    return True
