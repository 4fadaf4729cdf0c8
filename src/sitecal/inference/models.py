"""Load the model under validation without executing pickled code, and fingerprint it."""

from __future__ import annotations

import hashlib
import importlib
import logging
import pickle
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from sitecal.errors import ModelError
from sitecal.protocol import ModelSettings

__all__ = ["LoadedModel", "file_sha256", "load_model"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadedModel:
    """A model in eval mode, with what identifies it."""

    module: torch.nn.Module
    name: str
    format: str
    sha256: str
    path: Path


def file_sha256(path: Path, *, chunk: int = 1 << 20) -> str:
    """sha256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def load_model(settings: ModelSettings, path: Path) -> LoadedModel:
    """Load the model named by the protocol.

    Formats: ``safetensors`` (state dict + ``architecture``), ``state_dict`` (``torch.load`` with
    ``weights_only=True`` + ``architecture``), ``torch_export`` (a ``.pt2`` program), ``torchscript``.

    Raises
    ------
    ModelError
        When the file is missing, would execute pickled code, does not match the architecture, or the
        architecture cannot be imported. The message names the file and what to do.
    """
    if not path.exists():
        raise ModelError(f"{path}: model file not found. Check model.path in the protocol.")
    sha = file_sha256(path)
    try:
        if settings.format == "safetensors":
            from safetensors.torch import load_file

            module = _with_state(settings, load_file(str(path)), path)
        elif settings.format == "state_dict":
            try:
                state = torch.load(path, map_location="cpu", weights_only=True)
            except pickle.UnpicklingError as exc:
                raise ModelError(
                    f"{path}: refused: loading it would execute pickled code ({str(exc).splitlines()[0]}). "
                    "Save the weights with safetensors or torch.save(model.state_dict()) of plain tensors."
                ) from None
            if not isinstance(state, dict):
                raise ModelError(
                    f"{path}: expected a state dict (name → tensor), found {type(state).__name__}."
                )
            module = _with_state(settings, state, path)
        elif settings.format == "torch_export":
            module = torch.export.load(str(path)).module()
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                warnings.simplefilter("ignore", FutureWarning)
                module = torch.jit.load(str(path), map_location="cpu")
            logger.info("TorchScript model loaded (torch.jit is deprecated; torch.export .pt2 is preferred)")
    except ModelError:
        raise
    except (RuntimeError, ValueError, OSError, KeyError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ModelError(f"{path}: cannot load as {settings.format}: {first}. Check model.format.") from None
    if isinstance(module, torch.nn.Module):
        module.eval()
    return LoadedModel(module=module, name=settings.name, format=settings.format, sha256=sha, path=path)


def _with_state(settings: ModelSettings, state: dict[str, Any], path: Path) -> torch.nn.Module:
    assert settings.architecture is not None
    module_name, _, class_name = settings.architecture.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError):
        raise ModelError(
            f"model.architecture: cannot import '{settings.architecture}'. Install the package that defines "
            "it or correct the name."
        ) from None
    try:
        module = cls(**settings.architecture_args)
    except TypeError as exc:
        raise ModelError(f"model.architecture_args: {settings.architecture} rejected them: {exc}") from None
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        first = str(exc).splitlines()[0]
        raise ModelError(
            f"{path}: weights do not fit {settings.architecture}: {first}. Check architecture_args."
        ) from None
    return module
