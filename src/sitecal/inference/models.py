"""Load the model under validation without executing code from the model file, and fingerprint it.

What each format could run, and what sitecal does about it (torch 2.13):

``safetensors``
    Nothing: a JSON header and raw tensors.
``state_dict``
    ``torch.load(weights_only=True)``: the restricted unpickler builds only tensors and plain containers. A
    pickle naming any other class or function (a whole ``torch.save(model)``, an object whose
    ``__reduce__`` returns ``os.system``) is refused before anything in it runs.
``torch_export``
    ``torch.export.load`` is not safe on its own (its docstring: "uses pickle under the hood ... Never load
    data from an untrusted source"). A crafted ``.pt2`` can run code through weights or constants marked
    ``use_pickle`` (``torch.load(weights_only=False)``), opaque constants (``pickle.loads``), sample
    inputs that fail ``weights_only=True`` (retried with ``weights_only=False``), shape expressions
    (``sympy.sympify``, which is ``eval``), guard code (``exec`` in ``ExportedProgram.module()``),
    AOTInductor shared libraries (``data/aotinductor/``), and graph nodes whose target is any callable
    reachable from ``torch`` (``torch.os.system``). So sitecal reads the file once, checks those bytes
    with torch's own archive reader (only the entries ``torch.export.save`` writes, no pickled payload,
    sample inputs readable with ``weights_only=True``, shape expressions made of arithmetic, symbols and
    sympy function names only), loads from the same bytes, builds the module without guard code
    (``check_guards=False``; input shapes are still checked), and refuses a graph that calls anything but
    PyTorch operators or that was exported in training mode. What remains: the operators run as written.
``torchscript``
    ``torch.jit.load`` reads its pickles with TorchScript's C++ unpickler, which resolves TorchScript
    types only (a pickled ``os.system`` fails with "Unknown type name"), so no Python object from the
    file is built. But the archive is a program: TorchScript is Turing complete, ``__setstate__`` runs at
    load and ``forward`` at inference, and both may call any registered operator. PyTorch's SECURITY.md
    says to treat TorchScript like executable code from its provider; no inspection makes that safe, so
    sitecal loads it, logs a warning, and recommends ``torch_export`` or weights.
``monai_bundle``
    See :mod:`sitecal.inference._bundle`: nothing in the configs is evaluated; weights are read as above.

The model fingerprint is the sha256 of the file's bytes, the very bytes that were loaded; for a bundle
see :func:`sitecal.inference._bundle.bundle_sha256`. The weights alone do not determine a logit: the same
file under other ``architecture_args``, or under an edited architecture module, gives other outputs. So
:class:`LoadedModel` also carries the architecture, its arguments (canonical JSON) and ``code_sha256``, a
hash of the source files of every Python class the network is built from (see
:func:`architecture_code_sha256`). :meth:`LoadedModel.identity` is all of it, for the logit cache;
:meth:`LoadedModel.record` is what provenance writes.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import json
import logging
import pickle
import re
import secrets
import sys
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from sitecal.errors import ModelError
from sitecal.inference import _bundle, _pt2
from sitecal.inference._bundle_config import first_line
from sitecal.protocol import ModelSettings
from sitecal.provenance import file_sha256

__all__ = ["LoadedModel", "architecture_code_sha256", "file_sha256", "load_model"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadedModel:
    """A model in eval mode, with what identifies it.

    ``path`` is the model file, or the bundle folder for ``monai_bundle``; ``sha256`` is the file's
    sha256, or the bundle fingerprint. ``version``, ``architecture`` and ``architecture_args`` are the
    protocol's (the architecture for weights formats only; ``None`` and ``{}`` otherwise);
    ``code_sha256`` is :func:`architecture_code_sha256` of the network, or ``None`` for a program
    (``torchscript``, ``torch_export``), whose code is in the file that ``sha256`` covers.
    """

    module: torch.nn.Module
    name: str
    format: str
    sha256: str
    path: Path
    version: str | None = None
    architecture: str | None = None
    architecture_args: Mapping[str, Any] = field(default_factory=dict)
    code_sha256: str | None = None

    def identity(self) -> dict[str, Any]:
        """Everything about the model that determines its logits, as JSON values.

        ``{"format", "sha256", "version", "architecture", "architecture_args", "code_sha256"}``, with
        ``architecture_args`` as canonical JSON text (sorted keys, no spaces), so that ``NaN`` and
        ``"NaN"`` stay apart. The logit cache keys on it (:func:`sitecal.inference.cache_identity`);
        ``version`` is there so that a provider's new version of a model is never served old logits.
        """
        return {
            "format": self.format,
            "sha256": self.sha256,
            "version": self.version,
            "architecture": self.architecture,
            "architecture_args": _canonical_json(self.architecture_args),
            "code_sha256": self.code_sha256,
        }

    def record(self) -> dict[str, Any]:
        """What provenance records of the model (:data:`sitecal.provenance.MODEL_FIELDS`), as JSON values.

        ``architecture_args`` are written as plain JSON: a non-finite float becomes the string ``"NaN"``,
        ``"Infinity"`` or ``"-Infinity"``, which strict JSON has no number for.
        """
        return {
            "name": self.name,
            "version": self.version,
            "format": self.format,
            "file": self.path.name,
            "architecture": self.architecture,
            "architecture_args": json.loads(_canonical_json(self.architecture_args), parse_constant=str),
            "code_sha256": self.code_sha256,
        }


def _canonical_json(value: Any) -> str:
    """One text per value: sorted keys, no spaces, ASCII; values JSON cannot hold are tagged by type.

    YAML may give a protocol dates, byte strings or sets, which JSON has no type for; each becomes the
    string ``"<type name>:<repr>"`` (a set's members sorted), so the text stays the same run after run.
    """

    def tag(obj: Any) -> Any:
        if isinstance(obj, set | frozenset):
            return sorted(repr(member) for member in obj)
        return f"{type(obj).__name__}:{obj!r}"

    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), default=tag)
    except TypeError:  # keys of mixed types (1 and "a") cannot be sorted; YAML order is stable anyway
        return json.dumps(value, separators=(",", ":"), default=tag)


def architecture_code_sha256(module: torch.nn.Module) -> str:
    """sha256 of the code the network is built from: the files of every class in its module tree.

    Every submodule's class and the classes it inherits from (``torch.nn.Module`` subclasses from the
    site's package, MONAI and torch alike) are traced to the module that defines them, and that module's
    file (source, or compiled extension) is hashed. The result is the sha256 of the sorted lines
    ``<module name> <file sha256>``: file locations do not enter it, so two installs of the same code
    agree. Classes are taken from the objects already built; nothing new is imported.

    What it does not see: code a ``forward`` reaches only by calling functions or reading constants of
    other modules. A change there needs a new ``model.version`` in the protocol (part of the cache
    identity), or an emptied logit cache.
    """
    lines: dict[str, str] = {}
    for sub in module.modules():
        for cls in type(sub).__mro__:
            name = cls.__module__
            if cls is object or name in lines:
                continue
            source = getattr(sys.modules.get(name), "__file__", None)
            try:
                lines[name] = file_sha256(source) if source else "no file"
            except OSError:  # gone since import: the running code is unknown, so match no earlier run
                lines[name] = "unreadable " + secrets.token_hex(16)
    text = "".join(f"{name} {digest}\n" for name, digest in sorted(lines.items()))
    return hashlib.sha256(text.encode()).hexdigest()


def load_model(settings: ModelSettings, path: Path) -> LoadedModel:
    """Load the model named by the protocol, in eval mode, on the CPU.

    Parameters
    ----------
    settings : ModelSettings
        ``model`` of the protocol: ``format``, and ``architecture`` (+ ``architecture_args``) for weights.
    path : pathlib.Path
        The resolved ``model.path``: a file, or a bundle folder for ``monai_bundle``.

    Returns
    -------
    LoadedModel
        The module and its fingerprint (see the module docstring).

    Raises
    ------
    ModelError
        When the file or folder is missing, would run code from the file (see the module docstring), is
        not of the stated format, or its weights do not fit the architecture. The message names the file
        and what to do.
    """
    fmt = settings.format
    if fmt is None:
        raise ModelError(
            f"{path}: model.format is not given, so the model cannot be run here. Give model.format, or "
            "evaluate its outputs with data.predictions."
        )
    if fmt == "monai_bundle":
        module, sha = _load_bundle(path)
    else:
        data, sha = _read_file(path, fmt)
        if settings.format == "safetensors":
            module = _fit(
                _instantiate(settings), _read_safetensors(data, path), path, str(settings.architecture)
            )
        elif settings.format == "state_dict":
            module = _fit(
                _instantiate(settings), _read_pickled_weights(data, path), path, str(settings.architecture)
            )
        elif settings.format == "torch_export":
            module = _pt2.load_exported(data, path)
        else:
            module = _read_torchscript(data, path)
    module.eval()
    program = settings.format in ("torchscript", "torch_export") or isinstance(module, torch.jit.ScriptModule)
    return LoadedModel(
        module=module,
        name=settings.name,
        format=fmt,
        sha256=sha,
        path=path,
        version=settings.version,
        architecture=settings.architecture,
        architecture_args=dict(settings.architecture_args),
        code_sha256=None if program else architecture_code_sha256(module),
    )


def _load_bundle(folder: Path) -> tuple[torch.nn.Module, str]:
    files = _bundle.find_bundle_files(folder)
    blobs = {p: _read_file(p, "monai_bundle") for p in files.used}
    _bundle.read_metadata(files.metadata, _text(files.metadata, blobs[files.metadata][0]))
    sha = _bundle.bundle_sha256(folder, {p: digest for p, (_, digest) in blobs.items()})
    data = blobs[files.weights][0]
    if files.kind == "torchscript":
        return _read_torchscript(data, files.weights), sha
    assert files.config is not None  # find_bundle_files requires it for state-dict weights
    network = _bundle.build_network(files.config, _text(files.config, blobs[files.config][0]), folder=folder)
    state = (
        _read_safetensors(data, files.weights)
        if files.kind == "safetensors"
        else _read_pickled_weights(data, files.weights)
    )
    what = f"the network_def of {files.config.name} ({type(network).__name__})"
    return _fit(network, state, files.weights, what), sha


def _read_file(path: Path, fmt: str) -> tuple[bytes, str]:
    if not path.exists():
        raise ModelError(f"{path}: model file not found. Check model.path in the protocol.")
    if path.is_dir():
        raise ModelError(
            f"{path}: is a folder, but model.format '{fmt}' reads a file. For a MONAI bundle folder set "
            "model.format: monai_bundle."
        )
    data = path.read_bytes()
    return data, hashlib.sha256(data).hexdigest()


def _text(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ModelError(f"{path}: not UTF-8 text ({exc}). Save it as UTF-8.") from None


# -- weights ---------------------------------------------------------------------------------------------


def _instantiate(settings: ModelSettings) -> torch.nn.Module:
    assert settings.architecture is not None  # ModelSettings requires it for weights formats
    module_name, _, class_name = settings.architecture.partition(":")
    top = module_name.split(".")[0]
    if top in sys.stdlib_module_names or top == "__main__":
        # importing runs a module's top-level code: the standard library holds no network, and some of its
        # modules act on import (antigravity opens a browser), so a protocol may not name one
        raise ModelError(
            f"model.architecture: '{settings.architecture}' names a module of Python's standard library, "
            "which defines no network. Name the class of your model's package, 'package.module:ClassName'."
        )
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError):
        raise ModelError(
            f"model.architecture: cannot import '{settings.architecture}'. Install the package that defines "
            "it or correct the name."
        ) from None
    except Exception as exc:  # the module itself fails on import: its package is broken, not the protocol
        raise ModelError(
            f"model.architecture: importing '{module_name}' failed ({type(exc).__name__}: "
            f"{first_line(exc)}). Fix or reinstall the package that defines it."
        ) from None
    if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
        raise ModelError(f"model.architecture: '{settings.architecture}' is not a torch.nn.Module class.")
    try:
        module: torch.nn.Module = cls(**settings.architecture_args)
    except Exception as exc:
        raise ModelError(
            f"model.architecture_args: {settings.architecture} rejected them: {first_line(exc)}"
        ) from None
    return module


def _read_safetensors(data: bytes, path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load

    try:
        return dict(load(data))
    except Exception as exc:  # SafetensorError, or a header that is not JSON
        raise ModelError(
            f"{path}: not a safetensors file ({first_line(exc)}). Check model.format and model.path."
        ) from None


def _read_pickled_weights(data: bytes, path: Path) -> dict[str, torch.Tensor]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's pickle-protocol notes; the refusal says it all
            obj = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise _refuse_pickle(path, str(exc)) from None
    except Exception as exc:
        if "TorchScript" in str(exc):
            raise ModelError(
                f"{path}: is a TorchScript archive, not weights: use model.format torchscript (in a MONAI "
                "bundle, name it models/model.ts)."
            ) from None
        raise ModelError(
            f"{path}: cannot be read as weights saved with torch.save ({first_line(exc)}). Check "
            "model.format and model.path."
        ) from None
    return _state_dict_of(obj, path)


def _refuse_pickle(path: Path, message: str) -> ModelError:
    named = re.search(r"GLOBAL ([\w.]+)", message)
    if named:
        return ModelError(
            f"{path}: refused: loading it would execute pickled code (it names {named.group(1)}; a state "
            "dict holds tensors only). Save the weights alone: "
            "safetensors.torch.save_file(model.state_dict(), 'model.safetensors') or "
            "torch.save(model.state_dict(), 'model.pt')."
        )
    opcode = re.search(r"Unsupported operand (\d+)", message)
    detail = f"pickle opcode {opcode.group(1)}" if opcode else "its pickle"
    return ModelError(
        f"{path}: refused: the weights-only reader does not accept {detail}, so it cannot rule out pickled "
        "code (plain weights written with pickle_protocol 4 or 5 look like this too). Save them with "
        "safetensors, or torch.save(model.state_dict(), 'model.pt') with the default protocol."
    )


def _state_dict_of(obj: Any, path: Path) -> dict[str, torch.Tensor]:
    if _is_state_dict(obj):
        return dict(obj)
    if isinstance(obj, Mapping):
        wrapped = [key for key in ("model", "state_dict") if key in obj and _is_state_dict(obj[key])]
        if len(wrapped) == 1:
            logger.info("%s: weights read from its '%s' entry", path, wrapped[0])
            return dict(obj[wrapped[0]])
        keys = ", ".join(repr(k) for k in list(obj)[:6])
        raise ModelError(
            f"{path}: expected a state dict (name -> tensor), or one under 'model' or 'state_dict'; found "
            f"the keys {keys}. Save model.state_dict()."
        )
    raise ModelError(f"{path}: expected a state dict (name -> tensor), found {type(obj).__name__}.")


def _is_state_dict(obj: Any) -> bool:
    return isinstance(obj, Mapping) and all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in obj.items()
    )


def _fit(module: torch.nn.Module, state: dict[str, torch.Tensor], path: Path, what: str) -> torch.nn.Module:
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        # torch's first line only says "Error(s) in loading state_dict for X:"; the next one says which.
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        detail = lines[1] if len(lines) > 1 else lines[0]
        detail = detail if len(detail) <= 300 else detail[:297] + "..."
        raise ModelError(
            f"{path}: weights do not fit {what}: {detail}. Check the architecture and its arguments."
        ) from None
    return module


# -- programs --------------------------------------------------------------------------------------------


def _read_torchscript(data: bytes, path: Path) -> torch.nn.Module:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", FutureWarning)
            module: torch.nn.Module = torch.jit.load(io.BytesIO(data), map_location="cpu")  # type: ignore[no-untyped-call]
    except Exception as exc:
        raise ModelError(
            f"{path}: cannot load as TorchScript ({first_line(exc)}). Check model.format: a .pt2 program is "
            "torch_export, weights are state_dict or safetensors."
        ) from None
    logger.warning(
        "%s: TorchScript is a program and runs as written; load it only from a provider you trust "
        "(a torch.export .pt2 program or plain weights are checked more strictly)",
        path,
    )
    return module
