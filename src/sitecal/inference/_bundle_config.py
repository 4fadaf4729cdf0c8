"""Reading a MONAI bundle's JSON or YAML config within bounds: size, nesting depth, expanded YAML nodes.

Each bound is checked before anything is built from the text, so an alias bomb or a deeply nested file is
refused in one pass instead of exhausting memory or ending in RecursionError.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from sitecal.errors import ModelError
from sitecal.protocol import yaml_excess

__all__ = [
    "MAX_CONFIG_BYTES",
    "MAX_CONFIG_DEPTH",
    "MAX_CONFIG_NODES",
    "check_json_bounds",
    "check_yaml_bounds",
    "first_line",
    "parse_config",
    "too_deep",
    "too_large",
]

#: Largest metadata or inference config read, in bytes (4 MiB); MONAI's published bundles have configs of
#: a few kilobytes.
MAX_CONFIG_BYTES = 4 << 20
#: Deepest nesting of objects and lists in a bundle config; published bundles nest fewer than ten levels.
MAX_CONFIG_DEPTH = 100
#: Most nodes of a YAML config once its aliases are expanded.
MAX_CONFIG_NODES = 100_000
# the next string, bracket or brace of a JSON text; a string is skipped whole so brackets in it do not count
_JSON_OPEN = re.compile(r'["\[\]{}]')
_JSON_STRING_REST = re.compile(r'[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)


def parse_config(config: Path, text: str) -> dict[str, Any]:
    try:
        if config.suffix == ".json":
            check_json_bounds(config, text)
            data = json.loads(text)
        else:
            check_yaml_bounds(config, text)
            data = yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ModelError(f"{config}: cannot parse: {first_line(exc)}. Repair the config.") from None
    except RecursionError:  # a second lock behind the depth checks
        raise too_deep(config) from None
    if not isinstance(data, dict):
        raise ModelError(f"{config}: expected a mapping of entries, found {type(data).__name__}.")
    return data


def check_json_bounds(path: Path, text: str) -> None:
    """Refuse a JSON text over the size or depth limit, scanning it once without parsing it."""
    if len(text.encode("utf-8")) > MAX_CONFIG_BYTES:
        raise too_large(path)
    depth, position = 0, 0
    while (found := _JSON_OPEN.search(text, position)) is not None:
        char, position = found.group(), found.end()
        if char == '"':
            rest = _JSON_STRING_REST.match(text, position)
            if rest is None:
                return  # an unterminated string: json.loads reports it with its position
            position = rest.end()
        elif char in "[{":
            depth += 1
            if depth > MAX_CONFIG_DEPTH:
                raise too_deep(path, text.count("\n", 0, found.start()) + 1)
        else:
            depth -= 1


def check_yaml_bounds(path: Path, text: str) -> None:
    """Refuse a YAML text over the size, depth or expanded-size limit, before it is built."""
    if len(text.encode("utf-8")) > MAX_CONFIG_BYTES:
        raise too_large(path)
    excess = yaml_excess(text, max_nodes=MAX_CONFIG_NODES, max_depth=MAX_CONFIG_DEPTH)
    if excess is not None:
        raise ModelError(
            f"{path}:{excess.line}: the config {excess.problem}; a bundle config needs far fewer. "
            "Repair the bundle or ask its provider for one without them."
        )


def too_large(path: Path) -> ModelError:
    return ModelError(
        f"{path}: larger than {MAX_CONFIG_BYTES} bytes (4 MiB), the limit for a bundle's config files, "
        "which are kilobytes of text. Check that this is the bundle's config."
    )


def too_deep(path: Path, line: int | None = None) -> ModelError:
    where = f"{path}:{line}" if line is not None else str(path)
    return ModelError(
        f"{where}: the config is nested deeper than {MAX_CONFIG_DEPTH} levels of objects and lists; a "
        "bundle config needs fewer than ten. Repair the bundle or ask its provider for a flatter one."
    )


def first_line(exc: BaseException) -> str:
    """The first non-empty line of an exception's message, or its type name."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
