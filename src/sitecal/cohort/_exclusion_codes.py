"""The closed vocabulary of exclusion reasons a network part carries: codes, never free text.

An exclusion's reason in memory is sitecal's own sentence, but some sentences hold text that came from the
input: a DICOM value (``Modality``, ``BodyPartExamined``), a library's error message, a file system's error.
A site's part ships the *code* of each reason with its count; the central evaluation turns the code back
into the sentence below, so nothing a site (or its data) wrote reaches the central console, evaluation or
report, and a code that is not in this table is refused (:func:`reason_of`).

Each entry matches the reasons of one family (a regular expression matched at the start of the reason,
among the entries of the exclusion's stage). Where every reason of a family is one fixed sentence, the
central sentence is that sentence, so the central report reads as the site's would; where a family's
reasons carry a value or a library's message, the central sentence names the family and the detail stays
at the site. A reason no entry matches (a reason written after this table) ships as its stage's
``<stage>/other`` code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sitecal.cohort._header import _IMAGE_MODULE, REQUIRED_KEYWORDS
from sitecal.cohort._walk import _OUTSIDE
from sitecal.cohort.series import SERIES_TIE_BREAK

__all__ = ["CODE_PATTERN", "REASONS", "STAGES", "ReasonCode", "reason_code", "reason_of"]

#: Every stage at which sitecal excludes something, in the order of the flow (the flow's schema,
#: :data:`sitecal.results._kinds.ExclusionStage`, which cohort may not import: a test keeps the two equal).
STAGES = ("retrieve", "scan", "studies", "series", "labels", "predictions", "inference")
#: What a code looks like: ``<stage>/<name>``, at most 64 characters of a closed alphabet.
CODE_PATTERN = re.compile(r"[a-z]{1,16}/[A-Za-z0-9-]{1,47}")
#: The inference's reason for non-finite logits (:data:`sitecal.inference._forward.NON_FINITE_LOGITS`,
#: not imported: it would load torch; a test keeps the two equal).
NON_FINITE_LOGITS = "the model returned non-finite logits"
_KEPT_AT_SITE = "(the detail stays at the site)"


@dataclass(frozen=True)
class ReasonCode:
    """One code of the vocabulary: its stage, the sentence shown centrally, the reasons it stands for."""

    code: str
    stage: str
    sentence: str
    pattern: re.Pattern[str]


def _exact(stage: str, name: str, sentence: str) -> ReasonCode:
    """A code for one fixed sentence: shown centrally as written at the site."""
    return ReasonCode(f"{stage}/{name}", stage, sentence, re.compile(re.escape(sentence) + r"\Z"))


def _family(stage: str, name: str, sentence: str, start: str) -> ReasonCode:
    """A code for the reasons matching ``start`` (a regular expression), shown centrally as ``sentence``."""
    return ReasonCode(f"{stage}/{name}", stage, sentence, re.compile(start))


def _other(stage: str, what: str) -> ReasonCode:
    """The code of a reason of ``stage`` that no entry names (matches every reason: listed last)."""
    return ReasonCode(f"{stage}/other", stage, f"{what} for another reason {_KEPT_AT_SITE}", re.compile(""))


def _per_keyword() -> list[ReasonCode]:
    """The header reasons that name one tag of a closed list: one code per tag, the sentence kept."""
    codes = [_exact("scan", f"missing-{k}", f"missing required tag {k}") for k in REQUIRED_KEYWORDS]
    for k in _IMAGE_MODULE:
        implausible = f"implausible value in tag {k}"
        codes += [
            _exact("scan", f"not-integer-{k}", f"malformed value in tag {k} (not an integer)"),
            _exact("scan", f"malformed-{k}", f"malformed value in tag {k}"),
            _exact("scan", f"missing-image-{k}", f"missing required tag {k} of an image"),
            # the value itself (a number) stays at the site
            _family("scan", f"implausible-{k}", implausible, re.escape(implausible) + r" \(-?\d+\)\Z"),
        ]
    return codes


#: The vocabulary, in the order a reason is matched against it (within its stage; ``*/other`` last).
REASONS: tuple[ReasonCode, ...] = (
    _family("retrieve", "not-retrieved", "not retrieved from the PACS", "not retrieved from the PACS"),
    _other("retrieve", "not retrieved"),
    _exact("scan", "not-dicom", "not a DICOM file"),
    _family(
        "scan",
        "not-regular",
        "not a regular file (a FIFO, socket, device or link to one)",
        r"not a regular file\b",
    ),
    _exact("scan", "dangling-link", "dangling symbolic link (its target does not exist)"),
    _exact("scan", "link-loop", "symbolic link loop (not followed)"),
    _exact(
        "scan",
        "link-to-folder",
        "symbolic link to a folder (not followed: its files are read where they are)",
    ),
    _exact("scan", "link-outside", _OUTSIDE),
    _family(
        "scan", "unreadable-folder", "unreadable folder: its files were not read", r"unreadable folder\b"
    ),
    _family("scan", "unreadable-file", "unreadable file", r"unreadable file\b"),
    _family("scan", "corrupt-header", "corrupt DICOM header", r"corrupt DICOM header\b"),
    _exact("scan", "truncated", "truncated file"),
    _exact("scan", "dicomdir", "DICOMDIR media directory, not an image"),
    _exact(
        "scan",
        "header-only",
        "no pixel data although Rows and Columns are present (truncated file or header-only export)",
    ),
    _exact("scan", "no-pixel-data", "no pixel data (not an image)"),
    *_per_keyword(),
    _family("scan", "malformed-tag", "malformed value in a tag", r"malformed value in tag\b"),
    _family("scan", "missing-tag", "missing required tag", r"missing required tag\b"),
    _family(
        "scan",
        "too-large",
        "image too large: declares more pixel values than inputs.max_pixels_per_image",
        r"image too large\b",
    ),
    _family("scan", "read-timeout", "header read timed out", r"header read timed out\b"),
    _exact("scan", "duplicate-copy", "duplicate file: identical copy of an instance already in the cohort"),
    _exact(
        "scan",
        "duplicate-uid",
        "duplicate SOPInstanceUID with different content: the first file by path is kept; "
        "check the export for re-used UIDs",
    ),
    _other("scan", "file not read"),
    _exact("studies", "additional-image", "additional image in study (one image per study is analysed)"),
    _other("studies", "image not analysed"),
    _family(
        "series",
        "modality",
        "series not selected: Modality is not one of data.series.modality",
        r"series not selected: Modality\b",
    ),
    _exact(
        "series",
        "description",
        "series not selected: SeriesDescription does not match data.series.series_description",
    ),
    _family(
        "series",
        "body-part",
        "series not selected: BodyPartExamined is not one of data.series.body_part",
        r"series not selected: BodyPartExamined\b",
    ),
    _family(
        "series",
        "min-slices",
        "series not selected: fewer slices than data.series.min_slices",
        r"series not selected: \d+ slices?, fewer than min_slices \d+\Z",
    ),
    _exact("series", "not-chosen", f"another series of the study was chosen ({SERIES_TIE_BREAK})"),
    _exact("series", "no-series", "study has no series that meets data.series"),
    _other("series", "series not selected"),
    _exact("labels", "no-label", "study has no label"),
    _family(
        "labels",
        "no-join-key",
        "study has no value of data.key to join labels",
        r"study has no \w+ to join labels\Z",
    ),
    _exact("labels", "empty-label", "unusable label row: empty label"),
    _exact("labels", "label-twice", "unusable label row: key labelled twice with different labels"),
    _family(
        "labels",
        "unknown-label",
        "unusable label row: label is not one of the class names",
        r"unusable label row: label is not one of the class names\b",
    ),
    _family("labels", "empty-key", "unusable label row: empty key", r"unusable label row: empty \w+\Z"),
    _family("labels", "unusable-row", "unusable label row", r"unusable label row\b"),
    _exact("labels", "no-study", "label matches no study"),
    _exact("labels", "no-prediction-row", "label matches no row of the predictions file"),
    _other("labels", "label not used"),
    _exact("predictions", "no-row", "study has no row in the predictions file"),
    _family("predictions", "unusable-row", "unusable prediction row", r"unusable prediction row\b"),
    _exact("predictions", "no-study", "prediction row matches no study"),
    _other("predictions", "prediction not used"),
    _family(
        "inference", "model-failed", "the model failed on this study", r"the model failed on this study\b"
    ),
    _exact("inference", "non-finite-logits", NON_FINITE_LOGITS),
    _family(
        "inference",
        "transforms-cannot-take",
        "an image that the transforms cannot take",
        r"[^:]* that the transforms cannot take: ",
    ),
    _family("inference", "transform-failed", "a transform failed", r"a transform failed: "),
    _family(
        "inference",
        "not-an-array",
        "the transforms returned no image array: end inputs.transforms with array transforms",
        r"the transforms returned \w+, not an image array\b",
    ),
    _family(
        "inference",
        "image-not-finite",
        "image values are not finite (NaN or infinity) after the transforms",
        r"image values are not finite \(NaN or infinity\) after the transforms\b",
    ),
    _family(
        "inference",
        "not-one-volume",
        "the series is not one volume (its slices differ or are irregular)",
        r".*(differs between slices|lie at the same ImagePositionPatient|slice gaps are irregular"
        r"|cannot be put in slice order)",
    ),
    _other("inference", "image not read for the model"),
)

_BY_CODE = {entry.code: entry for entry in REASONS}
_BY_STAGE = {stage: [e for e in REASONS if e.stage == stage] for stage in STAGES}


def reason_code(stage: str, reason: str) -> str:
    """The code a part ships for an exclusion at ``stage`` with ``reason`` (the first entry that matches).

    Examples
    --------
    >>> reason_code("scan", "corrupt DICOM header (no data element where one was expected)")
    'scan/corrupt-header'
    >>> reason_code("series", "series not selected: BodyPartExamined DOE^JANE is not one of ['CHEST']")
    'series/body-part'
    >>> reason_code("scan", "anything else")
    'scan/other'

    Raises
    ------
    ValueError
        For a stage not in :data:`STAGES`: sitecal never writes one (the flow's schema refuses it too).
    """
    if stage not in _BY_STAGE:
        raise ValueError(f"exclusion stage {stage!r} is none of {', '.join(STAGES)}")
    return next(entry.code for entry in _BY_STAGE[stage] if entry.pattern.match(reason))


def reason_of(code: object) -> ReasonCode | None:
    """The vocabulary's entry for ``code`` (its stage and the sentence shown), or ``None`` if none is."""
    return _BY_CODE.get(code) if isinstance(code, str) else None
