r"""What a run was made of: software versions, hashes of its inputs and outputs, seeds, the command line.

The dataset manifest hash
-------------------------
:func:`dataset_manifest_sha256` names the exact data a run analysed without revealing any identifier. An
auditor holding the analysed DICOM files recomputes it so:

1. for every analysed instance, the line ``<SOPInstanceUID> <sha256 of the file>`` followed by a newline
   (``\n``): the UID as stored in the header (trailing padding removed), one space, then the 64 lower-case
   hex digits of the sha256 of the file's bytes, as ``sha256sum`` prints them;
2. the lines sorted bytewise (``LC_ALL=C sort``), duplicates kept;
3. the sha256 of the concatenated lines, UTF-8 encoded (``LC_ALL=C sort lines.txt | sha256sum``).

Only the hash leaves the run: the UIDs themselves are never written.
"""

from __future__ import annotations

import hashlib
import platform
import re
import sys
from collections.abc import Iterable, Mapping
from importlib.metadata import PackageNotFoundError, distribution, requires
from pathlib import Path
from typing import Any

__all__ = [
    "MODEL_FIELDS",
    "dataset_manifest_sha256",
    "dependency_versions",
    "document_id",
    "file_sha256",
    "instances_sha256",
    "manifest_sha256",
    "provenance_document",
]

_CHUNK = 1 << 20  # 1 MiB: files are hashed streaming, never read whole
#: What ``provenance.json`` records of the model, in this order; see :func:`provenance_document`.
MODEL_FIELDS = (
    "name",
    "version",
    "format",
    "file",
    "architecture",
    "architecture_args",
    "code_sha256",
)
_REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _canonical(name: str) -> str:
    """The PEP 503 normalised name: lower case, runs of ``-_.`` as one ``-``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def dependency_versions(root: str = "sitecal") -> dict[str, str]:
    """Installed versions of every runtime dependency of ``root``, transitively.

    Parameters
    ----------
    root : str, default "sitecal"
        The distribution whose dependencies are listed; it is itself left out.

    Returns
    -------
    dict of str to str
        ``{normalised name: version}``, sorted by name. Requirements that apply only with an extra
        (``; extra == "..."``) are not followed. A requirement that is not installed is recorded as
        ``"not installed"`` unless it carries an environment marker (``; python_version < "3.11"``), in
        which case it does not apply to this environment and is left out.

    Examples
    --------
    >>> versions = dependency_versions()
    >>> "numpy" in versions and "sitecal" not in versions
    True
    """
    versions: dict[str, str] = {}
    seen = {_canonical(root)}
    pending = [root]
    while pending:
        try:
            declared = requires(pending.pop()) or []
        except PackageNotFoundError:
            continue
        for requirement in declared:
            spec, _, marker = requirement.partition(";")
            if "extra" in marker:
                continue
            match = _REQUIREMENT.match(spec)
            if match is None:
                continue
            name = _canonical(match.group(1))
            if name in seen:
                continue
            seen.add(name)
            try:
                versions[name] = distribution(name).version
            except PackageNotFoundError:
                if not marker.strip():
                    versions[name] = "not installed"
                continue
            pending.append(name)
    return dict(sorted(versions.items()))


def file_sha256(path: str | Path) -> str:
    """sha256 of a file's bytes (64 lower-case hex digits), read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as fh:
        while block := fh.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def dataset_manifest_sha256(instances: Iterable[tuple[str, str | Path]]) -> str:
    r"""sha256 of the dataset manifest: the sorted (SOP Instance UID, file sha256) pairs analysed.

    Parameters
    ----------
    instances : iterable of (str, path)
        ``(SOPInstanceUID, file)`` for every analysed instance; each file is hashed (1 MiB chunks).

    Returns
    -------
    str
        64 hex digits. The manifest is the lines ``f"{uid} {file_sha256}\n"``, sorted bytewise, UTF-8;
        see the module docstring for how to recompute it by hand.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "a.dcm").write_bytes(b"a")
    >>> hashlib.sha256(f"1.2.3 {hashlib.sha256(b'a').hexdigest()}\n".encode()).hexdigest() == (
    ...     dataset_manifest_sha256([("1.2.3", folder / "a.dcm")]))
    True
    """
    return manifest_sha256((uid, file_sha256(path)) for uid, path in instances)


def manifest_sha256(entries: Iterable[tuple[str, str]]) -> str:
    """:func:`dataset_manifest_sha256` from ``(SOPInstanceUID, file sha256)`` pairs already computed."""
    lines = sorted(f"{_uid(uid)} {sha}\n".encode() for uid, sha in entries)
    digest = hashlib.sha256()
    for line in lines:
        digest.update(line)
    return digest.hexdigest()


def _uid(value: str) -> str:
    """A UID as the manifest writes it: without the NUL or space padding of an odd-length DICOM value."""
    return value.rstrip("\x00").strip()


def instances_sha256(instance_uids: Iterable[str]) -> str:
    """sha256 of the sorted SOP Instance UIDs analysed, one per line: names the data set, reveals no UID."""
    return hashlib.sha256("\n".join(sorted(instance_uids)).encode()).hexdigest()


def document_id(sha256: Mapping[str, str], *, created_utc: str) -> str:
    """The report's document ID, ``SC-`` and 12 hex digits of a hash of the run's input hashes and time.

    ``sha256`` is provenance's table of input hashes (protocol, model, labels, dataset manifest, ...) and
    ``created_utc`` the run's time, which the report prints: every run is a new document (two runs of the
    same inputs write different PDFs, so they share neither this ID nor report.dcm's Study Instance UID);
    ``SOURCE_DATE_EPOCH`` fixes the time, and then the same inputs give the same ID. Output hashes
    (predictions) are not part of it, so that an equivalent inference does not rename the report.
    """
    lines = [f"created_utc {created_utc}", *(f"{name} {value}" for name, value in sorted(sha256.items()))]
    return "SC-" + hashlib.sha256("\n".join(lines).encode()).hexdigest()[:12].upper()


def provenance_document(
    *,
    sitecal_version: str,
    created_utc: str,
    command_line: str,
    run_folder: str,
    seeds: Mapping[str, int],
    sha256: Mapping[str, str],
    model: Mapping[str, Any],
    transforms_sha256: str | None,
    device: str | None,
    pseudonym_key: str,
    logits: Mapping[str, int] | None = None,
    outputs_sha256: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The ``provenance.json`` document.

    Parameters
    ----------
    sha256 : mapping of str to str
        Hashes of the inputs (protocol, model, labels, dataset_manifest, instances); they make the
        document ID.
    outputs_sha256 : mapping of str to str, optional
        Hashes of files the run wrote (``predictions``); recorded in the same ``sha256`` table, not part
        of the document ID.
    model : mapping
        The model, with any of :data:`MODEL_FIELDS`: ``name``, ``version`` (the provider's), ``format``,
        ``file`` (the file or bundle folder name), ``architecture`` (``package.module:Class``, for
        weights), ``architecture_args`` (its keyword arguments, JSON values) and ``code_sha256`` (the
        hash of the architecture's code, :func:`sitecal.inference.architecture_code_sha256`). The weights'
        sha256 is in ``sha256["model"]``.
    logits : mapping of str to int, optional
        Where the analysed logits came from (``{"cached": n, "computed": m}``).

    Other parameters are recorded as given.

    Raises
    ------
    ValueError
        When ``model`` has a field that is not one of :data:`MODEL_FIELDS`.
    """
    unknown = sorted(set(model) - set(MODEL_FIELDS))
    if unknown:
        raise ValueError(
            f"The 'model' parameter of provenance_document takes the fields {', '.join(MODEL_FIELDS)}. "
            f"Got {', '.join(map(repr, unknown))}."
        )
    return {
        "sitecal_version": sitecal_version,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "executable": sys.implementation.name,
        "dependencies": dependency_versions(),
        "created_utc": created_utc,
        "command_line": command_line,
        "run_folder": run_folder,
        "seeds": dict(seeds),
        "sha256": {**sha256, **(outputs_sha256 or {})},
        "document_id": document_id(sha256, created_utc=created_utc),
        "model": {name: model[name] for name in MODEL_FIELDS if name in model},
        "transforms_sha256": transforms_sha256,
        "device": device,
        "pseudonym_key_fingerprint": pseudonym_key,
        **({"logits": dict(logits)} if logits is not None else {}),
    }
