"""The bundled demo weights on disk: read as safetensors (never pickle), with their model card.

Shared by the 2-D demo (:mod:`sitecal.demo.model`) and the CT demo (:mod:`sitecal.demo.ct.model`); the
``what`` and ``rebuild`` arguments only name the demo and its training command in error messages. The
files are written by ``examples/demo/train.py``, outside the package.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, TypeVar

from torch import nn

from ..errors import ModelError

__all__ = ["load_weights", "read_model_card"]

logger = logging.getLogger(__name__)

ModuleT = TypeVar("ModuleT", bound=nn.Module)


def read_model_card(path: Path, *, what: str, rebuild: str) -> dict[str, Any]:
    """Return the model card at ``path`` as a dictionary.

    Parameters
    ----------
    path : pathlib.Path
        The JSON card.
    what : str
        The demo's name in messages (``"demo"``, ``"CT demo"``).
    rebuild : str
        The command that rebuilds the card, for the message.

    Raises
    ------
    ModelError
        If the file is missing or is not valid JSON.
    """
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(
            f"Cannot read the {what} model card {path}: {exc}. "
            f"Reinstall sitecal, or rebuild it from a sitecal checkout with '{rebuild}'."
        ) from exc
    return data


def load_weights(model: ModuleT, path: Path, *, what: str, rebuild: str) -> ModuleT:
    """Load the safetensors state dict at ``path`` into ``model`` (strictly) and put it in eval mode.

    Parameters
    ----------
    model : torch.nn.Module
        A freshly built model of the architecture the weights are for.
    path : pathlib.Path
        The weights file.
    what, rebuild : str
        The demo's name and its training command, for the messages.

    Returns
    -------
    torch.nn.Module
        ``model`` itself, on the CPU, in eval mode.

    Raises
    ------
    ModelError
        If the file is missing, not a safetensors file, or does not fit ``model``.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        state = load_file(str(path), device="cpu")
    except (OSError, SafetensorError) as exc:
        raise ModelError(
            f"Cannot read the {what} weights {path}: {exc}. "
            f"Reinstall sitecal, or rebuild them from a sitecal checkout with '{rebuild}'."
        ) from exc
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise ModelError(
            f"The weights in {path} do not fit {type(model).__name__}: {exc}. Rebuild them with '{rebuild}' "
            "from a sitecal checkout."
        ) from exc
    model.eval()
    logger.debug("Loaded the %s model from %s", what, path)
    return model
