"""What a run was made of: software versions, hashes of its inputs, seeds, the command line."""

from __future__ import annotations

import hashlib
import platform
import re
import sys
from collections.abc import Iterable, Mapping
from importlib.metadata import PackageNotFoundError, requires, version
from typing import Any

__all__ = ["dependency_versions", "instances_sha256", "provenance_document"]


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
        "model": dict(model),
        "transforms_sha256": transforms_sha256,
        "device": device,
        "pseudonym_key_fingerprint": pseudonym_key,
        **({"logits": dict(logits)} if logits is not None else {}),
    }
