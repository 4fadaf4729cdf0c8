"""What a monitoring history stores, checked at its boundary: window labels, names, hashes and results.

A window's result is stored as canonical JSON (keys sorted, no whitespace, ASCII, no NaN or infinity), so
the same result always gives the same bytes, and a float reads back as the same float (``repr`` round
trip). Everything read back from a database is checked again: the database may have been edited.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from sitecal.errors import DataError

__all__ = [
    "MAX_NAME_CHARS",
    "MAX_RESULT_BYTES",
    "WINDOW_KINDS",
    "HistoryError",
    "check_kind",
    "check_name",
    "check_sha256",
    "check_window",
    "dump_result",
    "key_label",
    "load_result",
    "shown",
    "utc_now",
]

#: How monitoring cuts time, and the form of each kind's window label.
WINDOW_KINDS = ("week", "month", "quarter")
_WINDOW_FORMS = {
    "week": (re.compile(r"[0-9]{4}-W[0-9]{2}"), "an ISO week such as '2027-W09'"),
    "month": (re.compile(r"[0-9]{4}-[0-9]{2}"), "a month such as '2027-03'"),
    "quarter": (re.compile(r"[0-9]{4}-Q[0-9]"), "a quarter such as '2027-Q1'"),
}
#: The longest attribute or group name (a DICOM LO value has at most 64 characters).
MAX_NAME_CHARS = 256
#: The largest canonical JSON of one window's result.
MAX_RESULT_BYTES = 1024 * 1024
#: The deepest nesting of lists and objects in a result.
MAX_RESULT_DEPTH = 32

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_SHA256 = re.compile(r"[0-9a-f]{64}")


class HistoryError(DataError):
    """A monitoring history cannot be used or written; nothing of it was changed.

    It is locked by another process, of another schema version, baseline or window kind, not a history
    at all, over a size limit or unreachable, or what was to be written is not a valid entry.
    """


def shown(value: Any) -> str:
    """A short representation of a (possibly hostile) value for a message."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_kind(value: Any) -> str:
    """Return the window kind ``value`` ('week', 'month', 'quarter'), or raise with a spelling guess."""
    if isinstance(value, str) and value in WINDOW_KINDS:
        return value
    allowed = ", ".join(repr(k) for k in WINDOW_KINDS)
    raise HistoryError(f"The window kind must be one of {allowed}. Got {shown(value)}.")


def check_window(value: Any, kind: str) -> str:
    """Return ``value`` if it is a window label of ``kind``, or raise naming the expected form."""
    pattern, form = _WINDOW_FORMS[kind]
    ok = isinstance(value, str) and pattern.fullmatch(value) is not None
    if ok:
        year = int(value[:4])
        try:
            if kind == "week":
                dt.date.fromisocalendar(year, int(value[6:]), 1)
            elif kind == "month":
                dt.date(year, int(value[5:]), 1)
            else:
                ok = 1 <= int(value[6:]) <= 4 and year >= 1
        except ValueError:
            ok = False
    if not ok:
        raise HistoryError(f"The window {shown(value)} is not {form} (this history's windows are {kind}s).")
    return str(value)


def check_name(value: Any, *, what: str) -> str:
    """Return ``value`` if it is a usable attribute or group name (1 to 256 printable characters)."""
    ok = isinstance(value, str) and 0 < len(value) <= MAX_NAME_CHARS and not _CONTROL.search(value)
    if ok:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            ok = False
    if not ok:
        raise HistoryError(
            f"The {what} must be a text of 1 to {MAX_NAME_CHARS} printable characters. Got {shown(value)}."
        )
    return str(value)


def check_sha256(value: Any) -> str:
    """Return ``value`` if it is a sha256 as 64 lower-case hex digits."""
    if not (isinstance(value, str) and _SHA256.fullmatch(value)):
        raise HistoryError(f"data_sha256 must be a sha256 as 64 lower-case hex digits. Got {shown(value)}.")
    return value


def _check_value(value: Any, where: str, depth: int) -> None:
    """Raise unless ``value`` is plain JSON that reads back as it is (str keys, finite numbers)."""
    if depth > MAX_RESULT_DEPTH:
        raise HistoryError(f"{where} is nested deeper than {MAX_RESULT_DEPTH} levels.")
    if value is None or isinstance(value, bool | str):
        return
    if isinstance(value, int) and type(value) is int:
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise HistoryError(f"{where} is {value!r}: JSON has no NaN or infinity; store null instead.")
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise HistoryError(f"{where} has the key {shown(key)}: keys must be texts.")
            _check_value(item, f"{where}[{key!r}]", depth + 1)
        return
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _check_value(item, f"{where}[{i}]", depth + 1)
        return
    raise HistoryError(
        f"{where} is a {type(value).__name__}: a result holds only dicts, lists, texts, plain numbers, "
        "booleans and None (convert numpy numbers with float() or int())."
    )


def dump_result(result: Any, *, label: str) -> str:
    """The canonical JSON text of a window's ``result`` (``label`` names the window in messages)."""
    if not isinstance(result, Mapping):
        raise HistoryError(f"The result of {label} must be a mapping. Got a {type(result).__name__}.")
    _check_value(result, f"The result of {label}", 0)
    try:
        text = json.dumps(result, sort_keys=True, allow_nan=False, ensure_ascii=True, separators=(",", ":"))
    except ValueError as exc:  # an int past Python's digit limit for text
        raise HistoryError(f"The result of {label} cannot be written as JSON: {exc}") from None
    if len(text) > MAX_RESULT_BYTES:
        raise HistoryError(
            f"The result of {label} is {len(text)} bytes as JSON, over the limit of {MAX_RESULT_BYTES}: "
            "store aggregates only (no per-study rows)."
        )
    return text


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def load_result(text: Any, *, label: str) -> dict[str, Any]:
    """The result stored as ``text``; it must be the canonical JSON of a mapping (as written)."""
    if not isinstance(text, str) or len(text) > MAX_RESULT_BYTES:
        raise HistoryError(
            f"The stored result of {label} is not a JSON text of at most {MAX_RESULT_BYTES} bytes."
        )
    try:
        value = json.loads(text, parse_constant=_no_constant)
        canonical = dump_result(value, label=label)
    except (ValueError, RecursionError, HistoryError) as exc:
        raise HistoryError(f"The stored result of {label} is not a result sitecal wrote: {exc}") from None
    if canonical != text:
        raise HistoryError(f"The stored result of {label} is not in sitecal's canonical form: it was edited.")
    return dict(value)


def _plain(value: Any) -> str:
    return (
        value if isinstance(value, str) and len(value) <= 60 and not _CONTROL.search(value) else shown(value)
    )


def key_label(key: Sequence[Any]) -> str:
    """A window key (window, attribute, group) for messages: ``window 2027-03, scanner 'GE Signa'``."""
    window, attribute, group = key
    return f"window {_plain(window)}, {_plain(attribute)} {shown(group)}"


def utc_now() -> str:
    """The time now (UTC), as a history records it: ``2027-04-02T06:00:00Z``."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
