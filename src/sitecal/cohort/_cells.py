"""What a cell of a site's file may be: ASCII numbers, text without controls, no identifier's shape.

Python's ``float`` reads more than a number a site wrote: ``'٠.٥'`` (Arabic-Indic digits), ``'１'``
(full width), ``'1_000'`` (a digit separator), and the words ``inf`` and ``nan``. A score or a band edge
in digits other than ASCII is not one a vendor's export meant, so it is not read as a number
(:func:`ascii_float`). Text loses its control characters where it enters the cohort
(:func:`without_controls`), and a subgroup column whose values are shown as they are is refused when a
value looks like an identifier (:func:`identifier_shape`).
"""

from __future__ import annotations

import re

from sitecal._io import CONTROL_CHARACTERS

__all__ = ["ascii_float", "ascii_number_text", "identifier_shape", "without_controls"]

# A decimal number in ASCII digits, as float() reads it, and the words float() reads as infinities and
# NaN (so that a cell "inf" stays "not a finite number", as it always was, not "not a number")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:inf|infinity|nan)", re.I)
# What ascii_float strips around a number: spaces and tabs (DICOM pads DS values with a space)
_PADDING = " \t"

# Shapes of identifiers in a value (never shown; the reason names the shape, not the value)
_DICOM_NAME = re.compile(r"\^")  # a DICOM person name: FAMILY^GIVEN
_LAST_FIRST = re.compile(r"^[^\W\d_][^\W\d_'’ -]*\s*,\s*[^\W\d_]")  # "Doe, John"
_DIGIT_RUN = re.compile(r"\d(?:[\s\-./()]*\d){5,}")  # six digits or more: MRNs, phones, dates, UIDs
_DATE = re.compile(
    r"\b\d{1,4}[-/.]\d{1,2}[-/.]\d{1,4}\b"
    r"|\b\d{1,2}[ -]?(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?[ ,-]*\d{2,4}\b"
    r"|\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.? +\d{1,2},? +\d{2,4}\b",
    re.I,
)
_UID = re.compile(r"\b[0-2](?:\.[0-9]+){3,}\b")  # 1.2.840.10008...
_EMAIL = re.compile(r"[^\s@]+@[^\s@]+\.[^\s@]+")
#: Words of places, units and devices: two capitalised words holding one (``General Hospital``, ``Ysio
#: Demo``) are a site's or a scanner's name, not a person's.
_NOT_NAMES = frozenset(
    """
    annex building campus care center centre children city clinic community county demo department dept
    east emergency floor general health healthcare hospital imaging infirmary institute main medical
    memorial north outpatient inpatient radiology regional room royal saint scanner site south st station
    system systems trust unit university wards ward west wing women
    """.split()
)


def ascii_number_text(text: str) -> bool:
    """Whether ``text`` (padding stripped) is a number written in ASCII, or the word inf, infinity or nan.

    Examples
    --------
    >>> [ascii_number_text(t) for t in ["-1.5e3", " 2 ", ".5", "nan", "٣", "１", "1_000", "0x1", ""]]
    [True, True, True, True, False, False, False, False, False]
    """
    return _NUMBER.fullmatch(text.strip(_PADDING)) is not None


def ascii_float(text: str) -> float | None:
    """The number ``text`` holds in ASCII digits (``inf`` and ``nan`` included), or ``None``.

    Only what :func:`ascii_number_text` accepts is read; ``float`` does the reading, so a number gives
    the same float64 bit for bit as ``float(text)`` would.

    Examples
    --------
    >>> ascii_float("0.25"), ascii_float("٠.٥"), ascii_float("1_000"), ascii_float(" 7 ")
    (0.25, None, None, 7.0)
    """
    if not ascii_number_text(text):
        return None
    return float(text.strip(_PADDING))


def without_controls(text: str) -> str:
    r"""``text`` with each control character (``sitecal._io.CONTROL_CHARACTERS``) replaced by a space.

    Examples
    --------
    >>> without_controls("CT\x001\x85A\u202e")
    'CT 1 A '
    """
    return CONTROL_CHARACTERS.sub(" ", text)


def identifier_shape(value: str) -> str | None:
    """What identifier ``value`` looks like, or ``None``: the reason never holds the value, nor a quote.

    A person's name (``DOE^JOHN``, ``Doe, John``, or two capitalised words ``John Doe``), a run of
    six digits or more (an MRN, a phone number, a date ``19650304``; spaces, dashes, dots, slashes and
    brackets between them do not break the run), a date, a UID (``1.2.840.…``) or an e-mail address.
    Two capitalised words that are not words of places or devices (``Rose Garden``) have the shape of a name
    too: a column holding them needs a mapping.

    Examples
    --------
    >>> [identifier_shape(v) for v in ["DOE^JOHN", "John Doe", "Scanner A1", "12/03/65", "CT-2"]]
    ['a personal name', 'a personal name', None, 'a date', None]
    """
    if _DICOM_NAME.search(value) or _LAST_FIRST.search(value) or _capitalised_words(value):
        return "a personal name"
    if _EMAIL.search(value):
        return "an e-mail address"
    if _UID.search(value):
        return "a UID"
    if _DATE.search(value):
        return "a date"
    if _DIGIT_RUN.search(value):
        return "a long number (an ID, a phone number or a date)"
    return None


def _capitalised_words(value: str) -> bool:
    """Two capitalised words (``John Doe``) or two around a particle (``Ana de Souza``), as in a name.

    None of them may be a word of places or devices (:data:`_NOT_NAMES`: ``Ysio Demo`` and ``North Wing``
    name no one). A single capital is not a word here: ``Site A`` names a site, not a person.
    """
    words = value.split()
    if len(words) == 3 and words[1].isalpha() and words[1].islower() and len(words[1]) <= 3:
        words = [words[0], words[2]]  # de, van, da, von, del
    if len(words) != 2:
        return False
    return all(
        w.isalpha() and len(w) >= 2 and w[0].isupper() and w[1:].islower() and w.casefold() not in _NOT_NAMES
        for w in words
    )
