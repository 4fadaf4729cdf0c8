"""Scrubbing identifiers out of text that leaves the process: console lines, run.log, library warnings.

The run's own messages never carry an identifier (keys are pseudonyms, paths are pseudonymised); this is
the second line of defence for text sitecal does not write itself: a library's warning that quotes a
header value (pydicom's "Invalid value for VR UI: '1.2.840...'"), or an exception message of a library
that names a file. Anything that looks like a DICOM UID, a quoted header value or a path below the DICOM
folder is replaced before the text reaches a handler.
"""

from __future__ import annotations

import logging
import re

__all__ = ["ScrubFilter", "safe_text", "scrub"]

#: DICOM UIDs: dot-separated numbers, four components or more (``1.2.840.10008...``).
_UID = re.compile(r"(?<![\w.])\d+(?:\.\d+){3,}(?![\w])")
#: An IPv4 address with its port (``127.0.0.1:11112``): a PACS's address, kept in messages about it.
_ADDRESS = re.compile(r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?:\.(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}")
#: Quoted values in library messages (``Invalid value for VR PN: 'DOE^JANE'``), after a VR name or 'value'.
_QUOTED_VALUE = re.compile(r"""(\b(?:VR|value|Value)\b[^'"\n]{0,40}?)(['"])(?:(?!\2).){1,200}\2""")


#: What :func:`safe_text` removes from a library's message before it becomes an exclusion reason.
_SCRUB = (
    (re.compile(r"<(?:[\w.]+\.)?(\w+) object at 0x[0-9a-fA-F]+>"), r"\1"),
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), "<address>"),
    (re.compile(r"""(?:[A-Za-z]:)?[^\s'"`<>()\[\]{},;=]*[\\/][^\s'"`<>()\[\]{},;=]*"""), "<path>"),
    (
        re.compile(
            r"""[^\s'"`<>()\[\]{},;=]+\.(?:dcm|dicom|dic|ima|img|nii|nrrd|mha|mhd|png|jpe?g|tiff?|bmp|gz|"""
            r"""zip|tar|npz|npy|pt|pth|pt2|ts|safetensors|csv|tsv|txt|json|ya?ml)\b""",
            re.IGNORECASE,
        ),
        "<file>",
    ),
    (re.compile(r"[^\s'\"`<>()\[\]{},;=]*\^[^\s'\"`<>()\[\]{},;=]*"), "<name>"),
    (re.compile(r"\d+(?:\.\d+){2,}"), "<uid>"),
    (re.compile(r"\b\d{4}-\d{2}-\d{2}\b"), "<date>"),
    (re.compile(r"(?<![\d.])\d{6,}"), "<number>"),
)


def safe_text(text: str, limit: int = 200) -> str:
    """``text`` on one line, without what could identify a patient, cut to ``limit`` characters.

    Examples
    --------
    >>> safe_text("cannot read /data/DOE^JANE/1.2.840.113619.2.1.dcm (MRN 7777777)")
    'cannot read <path> (MRN <number>)'
    """
    for pattern, replacement in _SCRUB:
        text = pattern.sub(replacement, text)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def scrub(text: str) -> str:
    """``text`` with UID-like numbers and quoted header values replaced by placeholders.

    >>> scrub("Invalid value for VR UI: '1.2.840.113619.2.55.3'")
    "Invalid value for VR UI: '<value>'"
    >>> scrub("study 1.2.3.4.5 excluded")
    'study <UID> excluded'

    An IPv4 address followed by a port is kept (a PACS's address in a message about it); four numbers
    without a port are scrubbed like a UID:

    >>> scrub("cannot connect to PACS at 10.1.2.3:104; study 1.2.3.4 excluded")
    'cannot connect to PACS at 10.1.2.3:104; study <UID> excluded'
    """
    text = _QUOTED_VALUE.sub(lambda m: f"{m.group(1)}{m.group(2)}<value>{m.group(2)}", text)
    return _UID.sub(_uid_or_address, text)


def _uid_or_address(match: re.Match[str]) -> str:
    followed_by_port = re.match(r":\d", match.string[match.end() : match.end() + 2]) is not None
    return match.group(0) if followed_by_port and _ADDRESS.fullmatch(match.group(0)) else "<UID>"


class ScrubFilter(logging.Filter):
    """A logging filter that scrubs each record's message (and its traceback text) in place."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Replace the record's message by its scrubbed text; always keep the record."""
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: keep what can be shown
            message = str(record.msg)
        record.msg, record.args = scrub(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = scrub(logging.Formatter().formatException(record.exc_info))
        elif record.exc_text:
            record.exc_text = scrub(record.exc_text)
        return True
