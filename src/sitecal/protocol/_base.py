"""Shared pieces of the protocol schema: the strict base model and cross-field reference checks."""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from sitecal.metrics.registry import names as metric_names

if TYPE_CHECKING:
    MetricName = str
    CriterionMetricName = str
else:
    # Literal types built from the metric registry, so that the schema's enum and pydantic's messages
    # ("Input should be 'ece', 'nll', ...") list exactly the registry's names, in its order.
    #: A name in ``evaluation.metrics`` and ``evaluation.disparity_metrics``: a reported metric.
    MetricName = Literal[metric_names(reported=True)]
    #: A name an acceptance criterion may judge.
    CriterionMetricName = Literal[metric_names(criterion=True)]
_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"

# The identifier policy for subgroup tags. A subgroup's values are printed in cohort.csv, evaluation.json,
# the PDF and its figures, so a tag may be a subgroup only when its values cannot name a person:
#   1. SHOWN_TAGS are shown as they are (after normalisation, and pooled when rare, see
#      privacy.min_count_shown): they describe the device, the acquisition, the organisation, or the
#      patient only as coarsely as a validation must (sex; age, whole years or banded).
#   2. Any other tag needs a ``mapping`` (the site's CSV renames each value to a group name it chose; the
#      values it does not list become ``unmapped``), or, when it holds a number, ``bands``: then only the
#      site's group names or the band labels are shown. StationName is here, not in 1: it names a device,
#      but sites type operators' names into it. So are EthnicGroup and other special-category or free
#      text fields (a site names the groups it will report), and PatientSize and PatientWeight (an exact
#      height or weight picks out a patient; bands do not).
#   3. Some tags are refused even with a mapping: those whose VR is a name, a date or time, a UID, free
#      text, a sequence or bytes (REFUSED_VRS), and the identifiers in IDENTIFYING_TAGS. A mapping of such
#      values would have to list patients' identifiers in a file next to the protocol.
SHOWN_TAGS = frozenset(
    {
        "BodyPartExamined",
        "ConvolutionKernel",
        "DetectorType",
        "ImageLaterality",
        "InstitutionName",
        "InstitutionalDepartmentName",
        "KVP",
        "Laterality",
        "MagneticFieldStrength",
        "Manufacturer",
        "ManufacturerModelName",
        "Modality",
        "PatientAge",
        "PatientPosition",
        "PatientSex",
        "PhotometricInterpretation",
        "SliceThickness",
        "SoftwareVersions",
        "SpacingBetweenSlices",
        "ViewPosition",
    }
)
#: VRs never allowed as a subgroup (what their values are, for the message).
REFUSED_VRS = {
    "PN": "a person's name",
    "DA": "a date",
    "DT": "a date and time",
    "TM": "a time",
    "UI": "a UID",
    "LT": "free text",
    "ST": "free text",
    "UT": "free text",
    "SQ": "a sequence",
    **{vr: "binary data" for vr in ("OB", "OD", "OF", "OL", "OV", "OW", "UN")},
}
#: Identifiers of patients, studies and requests whose VR is not refused by itself (LO, SH, CS, ...).
IDENTIFYING_TAGS = frozenset(
    {
        "AccessionNumber",
        "AdmissionID",
        "BranchOfService",
        "FillerOrderNumberImagingServiceRequest",
        "IssuerOfAdmissionID",
        "IssuerOfPatientID",
        "MedicalRecordLocator",
        "MilitaryRank",
        "OtherPatientIDs",
        "PatientAddress",
        "PatientID",
        "PatientTelecomInformation",
        "PatientTelephoneNumbers",
        "PerformedProcedureStepID",
        "PlacerOrderNumberImagingServiceRequest",
        "RequestedProcedureID",
        "ScheduledProcedureStepID",
        "ServiceEpisodeID",
        "StudyID",
    }
)
#: VRs of numbers, which ``bands`` can group (PatientAge, VR AS, is banded as years).
NUMBER_VRS = frozenset({"DS", "IS", "FL", "FD", "US", "SS", "UL", "SL", "UV", "SV"})
_SHOWN_LIST = ", ".join(sorted(SHOWN_TAGS))


def tag_vr(keyword: str) -> str:
    """The VR of a DICOM keyword (the first of an ambiguous ``"US or SS"``)."""
    from pydicom.datadict import dictionary_VR, keyword_dict

    return str(dictionary_VR(keyword_dict[keyword])).split(" or ")[0]


def refused_tag(keyword: str) -> str | None:
    """Why ``keyword`` (a DICOM keyword) can never be a subgroup, even with a mapping; ``None`` if it can."""
    vr = tag_vr(keyword)
    if vr in REFUSED_VRS:
        why = f"holds {REFUSED_VRS[vr]} (VR {vr})"
    elif keyword in IDENTIFYING_TAGS:
        why = "identifies patients, studies or requests"
    else:
        return None
    return (
        f"'{keyword}' {why}, so it cannot be a subgroup, even with a mapping: its values would identify "
        f"patients in the outputs. Use one of the tags allowed as subgroups ({_SHOWN_LIST}), or another "
        "tag with a mapping."
    )


def unshown_tag(keyword: str, *, mapping: bool, bands: bool) -> str | None:
    """Why ``keyword`` needs a mapping (or bands) to be a subgroup; ``None`` when it is fine as given."""
    numeric = tag_vr(keyword) in NUMBER_VRS
    if keyword in SHOWN_TAGS or mapping or (bands and numeric):
        return None
    why = {
        "StationName": "sites type operators' names into it",
        "PatientSize": "an exact height picks out a patient",
        "PatientWeight": "an exact weight picks out a patient",
    }.get(keyword, "its values may identify people")
    ranges = ", or 'bands' (increasing edges) to show it in ranges" if numeric else ""
    return (
        f"'{keyword}' is not among the tags whose values are shown as they are ({why}). Add "
        "'mapping: <file>.csv' (columns 'value,group') to show each value as a group name you "
        f"choose{ranges}; or use one of the tags allowed as subgroups: {_SHOWN_LIST}."
    )


def unbandable_tag(keyword: str) -> str | None:
    """Why ``bands`` cannot apply to ``keyword``; ``None`` for PatientAge and single numbers."""
    from pydicom.datadict import dictionary_VM

    vr = tag_vr(keyword)
    if keyword == "PatientAge":
        return None
    if vr in NUMBER_VRS:
        vm = str(dictionary_VM(keyword))
        if vm == "1":
            return None
        return (
            f"'bands' groups single numbers, and '{keyword}' holds several (VM {vm}): every value would "
            "be 'unknown'. Remove 'bands', or use a mapping to group its values."
        )
    return (
        f"'bands' groups numbers, and '{keyword}' holds text (VR {vr}): every value would be 'unknown'. "
        "Remove 'bands', or use a mapping to group its values."
    )


def _at_most(value: int, bound: int, why: str) -> int:
    """``value`` if it is at most ``bound``, else a ValueError saying the bound and ``why``."""
    if value > bound:
        raise ValueError(f"must be at most {bound}: {why}. Got {value}")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)


class _ReferenceError(ValueError):
    """A cross-field reference failed; carries the location of the offending field."""

    def __init__(self, loc: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.loc = loc


def _check_reference(value: str | None, allowed: list[str], *loc: str | int) -> None:
    if value is not None and value not in allowed:
        guess = _spelling_guess(value, allowed)
        raise _ReferenceError(loc, f"'{value}' is not a subgroup defined under 'subgroups' {allowed}.{guess}")


def _spelling_guess(value: str, options: Any) -> str:
    close = difflib.get_close_matches(value, list(options), n=1, cutoff=0.6)
    return f" Did you mean '{close[0]}'?" if close else ""
