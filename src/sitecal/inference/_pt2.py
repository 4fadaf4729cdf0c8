"""``.pt2`` programs: refuse every way ``torch.export.load`` could run code from the file, then load it.

See :mod:`sitecal.inference.models` for the list of what a crafted ``.pt2`` can run in torch 2.13 and
what is checked. The checks read the archive with torch's own reader
(:class:`torch.export.pt2_archive.PT2ArchiveReader`) from the same bytes that are then loaded, so what is
checked is what is loaded.
"""

from __future__ import annotations

import io
import json
import math
import operator
import re
import warnings
import zipfile
from pathlib import Path
from typing import Any

import torch

from sitecal.errors import ModelError
from sitecal.inference._bundle_config import first_line

__all__ = ["load_exported"]


class _ExportedModule(torch.nn.Module):
    """An exported program's module, accepting ``train()``/``eval()``.

    ``ExportedProgram.module()`` raises on ``train()`` and ``eval()``: its mode was fixed at export time
    (sitecal refuses programs exported in training mode). Here they only set the flag, as callers that
    restore a module's mode expect.
    """

    def __init__(self, program: torch.nn.Module) -> None:
        super().__init__()
        self.program = program

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Run the program."""
        return self.program(*args, **kwargs)

    def train(self, mode: bool = True) -> _ExportedModule:
        """Set the flag only; the program keeps the mode it was exported in."""
        self.training = mode
        return self


_PT2_WEIGHTS = "data/weights/model_weights_config.json"
_PT2_CONSTANTS = "data/constants/model_constants_config.json"
_PT2_SAMPLE = "data/sample_inputs/model.pt"
_PT2_PROGRAM = "models/model.json"
_PT2_REQUIRED = (_PT2_PROGRAM, _PT2_WEIGHTS, _PT2_CONSTANTS, _PT2_SAMPLE)
_PT2_FIXED = frozenset({"archive_format", "archive_version", "byteorder", *_PT2_REQUIRED})
_PT2_ENTRY = re.compile(r"\.data/[\w.-]+|data/weights/weight_\d+|data/constants/tensor_\d+|extra/[\w./-]+")
_PT2_HOW = (
    "Export it again from the model in eval mode: "
    "torch.export.save(torch.export.export(model.eval(), example_inputs), 'model.pt2')."
)

_SYMPY_TOKEN = re.compile(
    r"\s+|\*\*|//|[-+*/%()<>=!&|~^,]|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|'[A-Za-z][A-Za-z0-9_]*'|[A-Za-z]\w*"
)
_SYMPY_NAMES = frozenset(
    {
        # sympy's constructors, relations, logic and functions that torch prints in shape expressions
        *"Symbol Integer Rational Float True False oo zoo nan Max Min Eq Ne Lt Le Gt Ge".split(),
        *"And Or Not Abs Mod floor ceiling sqrt Piecewise ITE".split(),
        # assumptions of Symbol(...)
        *"positive negative nonnegative nonpositive integer real finite infinite zero nonzero".split(),
        *"even odd rational commutative".split(),
        # torch.utils._sympy.functions.__all__
        *"FloorDiv ModularIndexing Where PythonMod CleanDiv CeilToInt FloorToInt CeilDiv IntTrueDiv".split(),
        *"FloatTrueDiv LShift RShift IsNonOverlappingAndDenseIndicator TruncToFloat TruncToInt".split(),
        *"RoundToInt RoundDecimal ToFloat FloatPow PowByNatural Identity".split(),
    }
)


def load_exported(data: bytes, path: Path) -> torch.nn.Module:
    """Check and load a ``.pt2`` program from its bytes; the module accepts ``train()``/``eval()``.

    Raises
    ------
    ModelError
        When the archive could run code (the reason names the entry), is not a program written by
        ``torch.export.save``, or was exported in training mode.
    """
    _check_pt2_archive(data, path)
    try:
        program = torch.export.load(io.BytesIO(data)).module(check_guards=False)
    except Exception as exc:
        raise ModelError(f"{path}: cannot load as torch_export ({first_line(exc)}). {_PT2_HOW}") from None
    _check_graph(program, path)
    return _ExportedModule(program)


def _refuse_pt2(path: Path, reason: str) -> ModelError:
    return ModelError(f"{path}: refused: {reason}; loading it would run code from the file. {_PT2_HOW}")


def _check_pt2_archive(data: bytes, path: Path) -> None:
    """Refuse every way a ``.pt2`` archive could run code in ``torch.export.load`` (module docstring)."""
    from torch.export.pt2_archive import PT2ArchiveReader

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = archive.namelist()
    except zipfile.BadZipFile:
        raise ModelError(f"{path}: not a .pt2 program (not a zip archive). Check model.format.") from None
    if (
        len({n.split("/", 1)[0] for n in names}) != 1
        or any("/" not in n for n in names)
        or len(set(names)) != len(names)
    ):
        raise _refuse_pt2(path, "its entries are not laid out as torch.export.save writes them")
    try:
        reader = PT2ArchiveReader(io.BytesIO(data))
        entries = set(reader.get_file_names())
    except Exception as exc:
        raise ModelError(
            f"{path}: not a .pt2 program written by torch.export.save ({first_line(exc)}). "
            "Check model.format."
        ) from None
    for name in sorted(entries):
        if name not in _PT2_FIXED and not _PT2_ENTRY.fullmatch(name):
            raise _refuse_pt2(path, _pt2_entry_reason(name))
    for name in _PT2_REQUIRED:
        if name not in entries:
            raise ModelError(f"{path}: no {name}: not a program written by torch.export.save. {_PT2_HOW}")
    for config, prefix in ((_PT2_WEIGHTS, "weight_"), (_PT2_CONSTANTS, "tensor_")):
        payloads = _pt2_json(reader, config, path).get("config")
        if not isinstance(payloads, dict):
            raise ModelError(f"{path}: {config} has no 'config' mapping. {_PT2_HOW}")
        for fqn, meta in payloads.items():
            if not isinstance(meta, dict) or meta.get("use_pickle", False) is not False:
                raise _refuse_pt2(path, f"'{fqn}' in {config} is a pickle (use_pickle)")
            if not re.fullmatch(rf"{prefix}\d+", str(meta.get("path_name"))):
                raise _refuse_pt2(
                    path, f"'{fqn}' in {config} is not a plain tensor ({meta.get('path_name')!r})"
                )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.load(io.BytesIO(reader.read_bytes(_PT2_SAMPLE)), map_location="cpu", weights_only=True)
    except Exception:
        raise _refuse_pt2(
            path,
            f"its sample inputs ({_PT2_SAMPLE}) are not plain tensors, and torch.export.load would then "
            "unpickle them with weights_only=False",
        ) from None
    for expr in _values_of(_pt2_json(reader, _PT2_PROGRAM, path), "expr_str"):
        if not _plain_sympy(expr):
            raise _refuse_pt2(
                path,
                f"the shape expression {expr[:80]!r} is not arithmetic, and torch evaluates it (sympify)",
            )


def _pt2_entry_reason(name: str) -> str:
    if name.startswith("data/aotinductor/"):
        return f"it holds AOTInductor native code ({name}), which torch.export.load loads into the process"
    if name.startswith(("data/executorch/", "data/mtia", "xl_model_weights/")):
        return f"it holds a compiled payload ({name})"
    if "opaque_obj_" in name or "custom_obj_" in name:
        return f"it holds pickled objects ({name})"
    if name.endswith(".pt"):
        return f"it uses the old layout whose weights are pickles ({name})"
    return f"it has an entry torch.export.save does not write ({name!r})"


def _pt2_json(reader: Any, name: str, path: Path) -> dict[str, Any]:
    try:
        value = json.loads(reader.read_string(name))
    except ValueError as exc:
        raise ModelError(f"{path}: {name} is not valid JSON ({exc}). {_PT2_HOW}") from None
    if not isinstance(value, dict):
        raise ModelError(f"{path}: {name} is not a JSON object. {_PT2_HOW}")
    return value


def _values_of(tree: Any, key: str) -> list[str]:
    """Every value stored under ``key`` at any depth of a JSON tree (non-strings as their repr)."""
    found: list[str] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for k, v in node.items():
                if k == key:
                    found.append(v if isinstance(v, str) else repr(v))
                else:
                    stack.append(v)
        elif isinstance(node, list):
            stack.extend(node)
    return found


def _plain_sympy(expr: str) -> bool:
    """Whether ``expr`` is numbers, operators, symbol names and allowed sympy names only: nothing to eval."""
    pos = 0
    while pos < len(expr):
        match = _SYMPY_TOKEN.match(expr, pos)
        if match is None:
            return False
        token = match.group()
        if token[0].isalpha() and token not in _SYMPY_NAMES and not re.fullmatch(r"[a-z]+\d+", token):
            return False
        pos = match.end()
    return True


_SYM_FUNCTIONS = "sym_int sym_float sym_max sym_min sym_not sym_ite sym_sqrt sym_sum _sym_sqrt".split()
_ALLOWED_FUNCTIONS = frozenset(
    {
        *(getattr(operator, n) for n in "getitem add sub mul truediv floordiv mod pow neg pos".split()),
        *(getattr(operator, n) for n in "eq ne lt le gt ge and_ or_ lshift rshift".split()),
        math.trunc,
        *(f for f in (getattr(torch, n, None) for n in _SYM_FUNCTIONS) if f is not None),
        torch._C._set_grad_enabled,
        torch.autograd.grad_mode.set_grad_enabled,
    }
)


def _is_operator(target: Any) -> bool:
    if isinstance(target, torch._ops.OpOverload | torch._ops.HigherOrderOperator):
        return True
    try:
        return target in _ALLOWED_FUNCTIONS
    except TypeError:  # unhashable
        return False


def _check_graph(program: torch.nn.Module, path: Path) -> None:
    """Refuse a graph that calls anything but PyTorch operators, or that was exported in training mode."""

    def callee(value: Any) -> Any:
        if (
            callable(value)
            and not isinstance(value, torch.fx.Node | torch.nn.Module)
            and not _is_operator(value)
        ):
            raise _refuse_pt2(path, f"its graph passes {_name(value)} to an operator")
        return value

    for graph_module in program.modules():
        if not isinstance(graph_module, torch.fx.GraphModule):
            continue
        for node in graph_module.graph.nodes:
            if node.op in ("placeholder", "get_attr", "output"):
                continue
            if node.op != "call_function" or not _is_operator(node.target):
                raise _refuse_pt2(
                    path, f"its graph calls {_name(node.target)}, which is not a PyTorch operator"
                )
            torch.fx.node.map_aggregate((node.args, node.kwargs), callee)
            if isinstance(node.target, torch._ops.OpOverload):
                for index, argument in enumerate(node.target._schema.arguments):
                    if argument.name not in ("training", "train"):
                        continue
                    value = node.args[index] if index < len(node.args) else node.kwargs.get(argument.name)
                    if value is True:
                        raise ModelError(
                            f"{path}: refused: exported in training mode ({node.target} with "
                            f"{argument.name}=True: batch statistics or random dropout, so a study's logits "
                            f"would depend on its batch). {_PT2_HOW}"
                        )


def _name(target: Any) -> str:
    module = getattr(target, "__module__", None)
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or repr(target)
    return f"{module}.{name}" if module else str(name)
