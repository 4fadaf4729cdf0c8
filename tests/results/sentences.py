"""Where an evaluation document may hold free text, and a finder of sentences elsewhere (for the tests).

The evaluation stores codes and numbers; the report words them. A document's strings are then codes (from
a closed vocabulary, enforced by the types), names (classes, groups, attributes, metrics, keys) or the
few free texts listed in ``FREE_TEXT``: the protocol's own words and the cohort layer's exclusion reasons.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

#: JSON paths (indices as ``[]``, keys of free mappings as ``.*``) whose strings are not the evaluation's.
FREE_TEXT = {
    "$.acceptance[].description": "the protocol's description of a criterion (the site's words)",
    "$.attribute_labels.*": "the protocol's display label of a subgroup attribute",
    "$.cohort_flow.exclusions[].reason": "the cohort layer's exclusion reasons (not the evaluation's)",
}

#: Four lower-case words in a row: prose, not a name or a code.
SENTENCE = re.compile(r"\b[a-z][a-z'’-]*(?:[ ,;:]+[a-z][a-z'’()/-]*){3,}")


def strings(value: Any, path: str = "$") -> Iterator[tuple[str, str]]:
    """Every string value of a JSON document with its path (list indices as ``[]``)."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from strings(item, f"{path}.{key}")
    elif isinstance(value, list):
        for item in value:
            yield from strings(item, f"{path}[]")
    elif isinstance(value, str):
        yield path, value


def _free(path: str) -> bool:
    return any(
        path == pattern or (pattern.endswith(".*") and path.rsplit(".", 1)[0] == pattern[:-2])
        for pattern in FREE_TEXT
    )


def sentences(document: Any) -> list[tuple[str, str]]:
    """The strings of a document outside ``FREE_TEXT`` that read as prose."""
    return [(path, text) for path, text in strings(document) if not _free(path) and SENTENCE.search(text)]
