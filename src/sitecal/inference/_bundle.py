"""MONAI bundle folders: find the files a bundle's network needs, and build the network without running code.

A bundle (https://docs.monai.io/en/stable/mb_specification.html) is read from its standard layout::

    <bundle>/configs/metadata.json                      required
    <bundle>/configs/inference.json (or .yaml, .yml)    required unless the weights are models/model.ts
    <bundle>/models/model.safetensors                   weights, preferred
    <bundle>/models/model.pt                            weights, else (read with weights_only=True)
    <bundle>/models/model.ts                            TorchScript, else (no network_def needed)

The network is the inference config's ``network_def``, resolved by :class:`monai.bundle.ConfigParser`
(``@id`` references, ``%id`` macros, relative ids) with everything that would run code from the bundle
refused first, each with the config file and the key:

- a ``$`` expression (MONAI evaluates it with ``eval``), anywhere in the top-level entries that
  ``network_def`` draws on, directly or through references and macros;
- a macro naming another file (``%other.json#key``): it would be read relative to the working directory,
  and the model fingerprint would not cover it;
- a ``_target_`` that is not a literal name of a ``torch.nn.Module`` class (MONAI's short names such as
  ``DenseNet121`` are looked up as MONAI does), or that lives in a module inside the bundle folder
  (a bundle's own ``scripts/`` are never imported);
- ``_mode_`` other than ``"default"`` (``"callable"`` returns a function, ``"debug"`` starts pdb), and
  ``_debug_``.

The constructors of the named classes do run: they are code installed on this machine, as with
``model.architecture`` for a plain state dict.

A bundle's configs are kilobytes of text, so they are bounded before they are parsed: each at most
:data:`MAX_CONFIG_BYTES`, nested at most :data:`MAX_CONFIG_DEPTH` levels (JSON that nests deeper ends
Python's parser in RecursionError), and a YAML config at most :data:`MAX_CONFIG_NODES` nodes once its
aliases are expanded (a few lines of anchors and aliases can expand to billions).
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import logging
import pydoc
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from sitecal.errors import ModelError
from sitecal.inference._bundle_config import (
    MAX_CONFIG_BYTES,
    MAX_CONFIG_DEPTH,
    MAX_CONFIG_NODES,
    check_json_bounds,
    first_line,
    parse_config,
    too_deep,
    too_large,
)

__all__ = [
    "MAX_CONFIG_BYTES",
    "MAX_CONFIG_DEPTH",
    "MAX_CONFIG_NODES",
    "BundleFiles",
    "build_network",
    "bundle_sha256",
    "find_bundle_files",
    "read_metadata",
]

logger = logging.getLogger(__name__)

WeightsKind = Literal["safetensors", "state_dict", "torchscript"]

_WEIGHTS: tuple[tuple[str, WeightsKind], ...] = (
    ("models/model.safetensors", "safetensors"),
    ("models/model.pt", "state_dict"),
    ("models/model.ts", "torchscript"),
)
_CONFIGS = ("configs/inference.json", "configs/inference.yaml", "configs/inference.yml")
_NETWORK_KEY = "network_def"


@dataclass(frozen=True)
class BundleFiles:
    """The files of a bundle that sitecal uses.

    Attributes
    ----------
    folder : pathlib.Path
        The bundle folder.
    metadata : pathlib.Path
        ``configs/metadata.json``.
    config : pathlib.Path or None
        The inference config; None when the weights are TorchScript (the network is in the file).
    weights : pathlib.Path
        The weights file chosen: ``model.safetensors``, else ``model.pt``, else ``model.ts``.
    kind : {"safetensors", "state_dict", "torchscript"}
        How ``weights`` is read.
    """

    folder: Path
    metadata: Path
    config: Path | None
    weights: Path
    kind: WeightsKind

    @property
    def used(self) -> tuple[Path, ...]:
        """The files read, in a fixed order: metadata, config (if any), weights."""
        return tuple(p for p in (self.metadata, self.config, self.weights) if p is not None)


def find_bundle_files(folder: Path) -> BundleFiles:
    """Locate the metadata, inference config and weights of the bundle in ``folder``.

    Raises
    ------
    ModelError
        When the folder, ``configs/``, the metadata, the weights or (for state-dict weights) the
        inference config is missing, or two inference configs compete.
    """
    if not folder.exists():
        raise ModelError(f"{folder}: bundle folder not found. Check model.path in the protocol.")
    if not folder.is_dir():
        raise ModelError(
            f"{folder}: model.format is monai_bundle, so model.path must be the bundle folder (the one "
            "holding configs/ and models/), not a file."
        )
    if not (folder / "configs").is_dir():
        raise ModelError(
            f"{folder}: no configs/ folder, so this is not a MONAI bundle (expected configs/metadata.json "
            "and configs/inference.json). Point model.path at the bundle folder."
        )
    metadata = folder / "configs" / "metadata.json"
    if not metadata.is_file():
        raise ModelError(f"{metadata}: not found; every MONAI bundle has one. Add it or fix model.path.")
    found = [(folder / rel, kind) for rel, kind in _WEIGHTS if (folder / rel).is_file()]
    if not found:
        raise ModelError(
            f"{folder}: no weights: expected models/model.safetensors, models/model.pt or models/model.ts."
        )
    weights, kind = found[0]
    configs = [folder / rel for rel in _CONFIGS if (folder / rel).is_file()]
    if len(configs) > 1:
        names = ", ".join(p.name for p in configs)
        raise ModelError(f"{folder / 'configs'}: both {names} exist; keep the one that defines the network.")
    config = configs[0] if configs else None
    if kind == "torchscript":
        config = None  # the program is in the file; network_def is not read
    elif config is None:
        raise ModelError(
            f"{folder / 'configs'}: no inference.json or inference.yaml, which {weights.name} needs for its "
            "network_def. Add the bundle's inference config."
        )
    for text_file in (metadata, config):
        if text_file is not None and text_file.stat().st_size > MAX_CONFIG_BYTES:
            raise too_large(text_file)
    return BundleFiles(folder=folder, metadata=metadata, config=config, weights=weights, kind=kind)


def bundle_sha256(folder: Path, digests: Mapping[Path, str]) -> str:
    r"""Fingerprint of a bundle: sha256 over the files used, independent of their order.

    It is the sha256 of the UTF-8 text made of one line ``"<relative path> <file sha256>\n"`` per file,
    the path relative to ``folder`` with ``/`` separators, the lines sorted.

    Examples
    --------
    >>> import hashlib
    >>> from pathlib import Path
    >>> digest = bundle_sha256(Path("b"), {Path("b/models/model.pt"): "ab"})
    >>> digest == hashlib.sha256(b"models/model.pt ab\n").hexdigest()
    True
    """
    lines = sorted(f"{path.relative_to(folder).as_posix()} {sha}\n" for path, sha in digests.items())
    return _sha256_text("".join(lines))


def read_metadata(path: Path, text: str) -> dict[str, Any]:
    """Parse ``configs/metadata.json`` (already read as ``text``); it must be a JSON object."""
    check_json_bounds(path, text)
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ModelError(f"{path}: not valid JSON ({exc}). Repair the bundle's metadata.") from None
    except RecursionError:  # a second lock behind the depth check
        raise too_deep(path) from None
    if not isinstance(data, dict):
        raise ModelError(f"{path}: expected a JSON object, found {type(data).__name__}.")
    logger.info("MONAI bundle %s, version %s", data.get("name", "(unnamed)"), data.get("version", "?"))
    return data


def build_network(config: Path, text: str, *, folder: Path) -> torch.nn.Module:
    """Instantiate ``network_def`` from an inference config (already read as ``text``), evaluating nothing.

    Parameters
    ----------
    config : pathlib.Path
        The config file, for messages and to choose JSON or YAML.
    text : str
        Its content.
    folder : pathlib.Path
        The bundle folder: no ``_target_`` may be imported from inside it.

    Returns
    -------
    torch.nn.Module
        The network, with the weights its constructor gives it.

    Raises
    ------
    ModelError
        When the config cannot be parsed, has no ``network_def``, uses anything refused (see the module
        docstring), or the network cannot be built; the message names the file and the key.
    """
    from monai.bundle.config_parser import ConfigParser

    raw = parse_config(config, text)
    if _NETWORK_KEY not in raw:
        raise ModelError(
            f"{config}: no '{_NETWORK_KEY}' entry, which sitecal builds the network from. Add it, or ship "
            "the network as TorchScript in models/model.ts."
        )
    checker = _Checker(config, folder.resolve())
    try:
        used = checker.entries(raw)
    except RecursionError:  # a second lock behind the depth check in _parse_config
        raise too_deep(config) from None
    parser = ConfigParser(copy.deepcopy({key: raw[key] for key in used}))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # MONAI's deprecation notes; every refusal above is explicit
            # eval_expr=False as a second lock: no expression survives the checks, and none would be run.
            network = parser.get_parsed_content(_NETWORK_KEY, instantiate=True, eval_expr=False)
    except Exception as exc:  # MONAI wraps constructor errors in RuntimeError; show the cause
        cause = exc.__cause__ if exc.__cause__ is not None else exc
        raise ModelError(
            f"{config}: {_NETWORK_KEY}: cannot build the network: {first_line(cause)}. "
            "Correct the arguments in the config."
        ) from None
    if not isinstance(network, torch.nn.Module):
        raise ModelError(f"{config}: {_NETWORK_KEY} built a {type(network).__name__}, not a torch.nn.Module.")
    return network


class _Checker:
    """Walks what ``network_def`` draws on, refusing what would run code; see the module docstring."""

    def __init__(self, config: Path, folder: Path) -> None:
        self.config = config
        self.folder = folder
        from monai.bundle.config_item import ComponentLocator

        self.locator = ComponentLocator()

    def entries(self, raw: dict[str, Any]) -> list[str]:
        """Top-level keys reached from ``network_def`` through references and macros, each checked whole."""
        todo: list[tuple[str, str]] = [(_NETWORK_KEY, _NETWORK_KEY)]
        seen: set[str] = set()
        while todo:
            key, via = todo.pop()
            if key in seen:
                continue
            if key not in raw:
                raise ModelError(
                    f"{self.config}: '{via}' refers to '{key}', which the file does not define. "
                    "Define it or correct the reference."
                )
            seen.add(key)
            todo.extend((ref, where) for ref, where in self._walk(raw[key], key))
        return sorted(seen)

    def _walk(self, value: Any, key: str) -> list[tuple[str, str]]:
        """Check one entry; return (top-level key referred to, where) pairs."""
        from monai.bundle.config_parser import ConfigParser
        from monai.bundle.reference_resolver import ReferenceResolver

        refs: list[tuple[str, str]] = []
        if isinstance(value, str):
            try:
                text = ConfigParser.resolve_relative_ids(key, value)
            except ValueError as exc:
                raise ModelError(f"{self.config}: key '{key}': {exc}") from None
            if text.startswith("$"):
                raise self._refuse(
                    key, f"is a Python expression ({_short(value)})", "replace it with a value"
                )
            if text.startswith("%"):
                path, ids = ConfigParser.split_path_id(text[1:])
                if path:
                    raise self._refuse(
                        key, f"is a macro reading another file ({_short(value)})", "copy that content here"
                    )
                refs.append((self._top(ids, key, value), key))
            refs.extend(
                (self._top(ref, key, value), key) for ref in ReferenceResolver.match_refs_pattern(text)
            )
        elif isinstance(value, Mapping):
            for sub, item in value.items():
                refs.extend(self._walk(item, f"{key}::{sub}"))
            if "_target_" in value:
                self._check_component(value, key)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                refs.extend(self._walk(item, f"{key}::{index}"))
        return refs

    def _top(self, ref: str, key: str, value: str) -> str:
        from monai.bundle.reference_resolver import ReferenceResolver

        top = ReferenceResolver.split_id(ref)[0]
        if not top:
            raise self._refuse(key, f"refers to the whole config ({_short(value)})", "refer to one entry")
        return top

    def _check_component(self, value: Mapping[str, Any], key: str) -> None:
        mode = value.get("_mode_", "default")
        if mode != "default":
            raise self._refuse(f"{key}::_mode_", f"is {mode!r}", "remove it (only 'default' is accepted)")
        if "_debug_" in value:
            raise self._refuse(f"{key}::_debug_", "would start the debugger", "remove it")
        target = value["_target_"]
        where = f"{key}::_target_"
        if not isinstance(target, str) or not target or target[0] in "$@%":
            raise self._refuse(where, f"is {_short(target)}", "name a torch.nn.Module class literally")
        module = self.locator.get_component_module_name(target)
        if isinstance(module, list):
            raise self._refuse(
                where,
                f"names '{target}', which several MONAI components are called ({', '.join(module)})",
                "write the full path",
            )
        full = f"{module}.{target}" if module else target
        self._check_not_in_bundle(full, where)
        try:
            obj = pydoc.locate(full)
        except Exception as exc:  # pydoc.ErrorDuringImport: the module failed while importing
            raise ModelError(
                f"{self.config}: key '{where}': cannot import '{full}': {first_line(exc)}"
            ) from None
        if obj is None:
            raise ModelError(
                f"{self.config}: key '{where}': cannot import '{full}'. Install the package that defines it "
                "or correct the name."
            )
        if not (isinstance(obj, type) and issubclass(obj, torch.nn.Module)):
            raise self._refuse(
                where, f"names '{full}', which is not a torch.nn.Module class", "name a network class"
            )

    def _check_not_in_bundle(self, full: str, where: str) -> None:
        top = full.split(".")[0]
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            raise ModelError(
                f"{self.config}: key '{where}': cannot import '{full}': no module '{top}'. Install the "
                "package that defines it or correct the name."
            )
        places = [spec.origin, *(spec.submodule_search_locations or [])]
        for place in places:
            if place and Path(place).resolve().is_relative_to(self.folder):
                raise self._refuse(
                    where,
                    f"names '{full}', which would be imported from the bundle's own code ({place})",
                    "install that code as a package you have reviewed",
                )

    def _refuse(self, key: str, what: str, todo: str) -> ModelError:
        return ModelError(
            f"{self.config}: key '{key}' {what}: refused, sitecal never runs code from a bundle; {todo}."
        )


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
