"""What a run was made of: software versions, hashes of its inputs, seeds, the command line."""

from __future__ import annotations

import hashlib
import platform
import re
import sys
from collections.abc import Iterable, Mapping
from importlib.metadata import PackageNotFoundError, requires, version
from typing import Any

__all__ = ["dependency_versions", "document_id", "instances_sha256", "provenance_document"]


def dependency_versions() -> dict[str, str]:
    """Installed versions of sitecal's declared runtime dependencies (``not installed`` when absent)."""
    names: list[str] = []
    for requirement in requires("sitecal") or []:
        if "extra ==" in requirement:
            continue
        match = re.match(r"[A-Za-z0-9_.-]+", requirement)
        if match:
            names.append(match.group(0))
    versions = {}
    for name in sorted(set(names), key=str.lower):
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def instances_sha256(instance_uids: Iterable[str]) -> str:
    """sha256 of the sorted SOP Instance UIDs analysed, one per line: names the data set, reveals no UID."""
    return hashlib.sha256("\n".join(sorted(instance_uids)).encode()).hexdigest()


def document_id(sha256: Mapping[str, str]) -> str:
    """The report's document ID, ``SC-`` and 12 hex digits of a hash of the run's input hashes.

    ``sha256`` is provenance's hash table (protocol, model, labels, instances): the same protocol, model
    and data give the same ID, any change another one.
    """
    canonical = "\n".join(f"{name} {value}" for name, value in sorted(sha256.items()))
    return "SC-" + hashlib.sha256(canonical.encode()).hexdigest()[:12].upper()


def provenance_document(
    *,
    sitecal_version: str,
    created_utc: str,
    command_line: str,
    run_folder: str,
    seeds: Mapping[str, int],
    sha256: Mapping[str, str],
    model: Mapping[str, Any],
    transforms_sha256: str,
    device: str,
    pseudonym_key: str,
    logits: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """The ``provenance.json`` document.

    ``logits`` counts where the analysed logits came from (``{"cached": n, "computed": m}``).
    """
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
        "sha256": dict(sha256),
        "document_id": document_id(sha256),
        "model": dict(model),
        "transforms_sha256": transforms_sha256,
        "device": device,
        "pseudonym_key_fingerprint": pseudonym_key,
        **({"logits": dict(logits)} if logits is not None else {}),
    }
