"""Shared pieces of the protocol schema: the strict base model and cross-field reference checks."""

from __future__ import annotations

import difflib
import functools
import re
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from sitecal.metrics.registry import METRICS
from sitecal.metrics.registry import names as metric_names

if TYPE_CHECKING:
    MetricName = str
    CriterionMetricName = str
    DisparityMetricName = str
else:
    # Literal types built from the metric registry, so that the schema's enum and pydantic's messages
    # ("Input should be 'ece', 'nll', ...") list exactly the registry's names, in its order.
    #: A name in ``evaluation.metrics`` and ``evaluation.disparity_metrics``: a reported metric.
    MetricName = Literal[metric_names(reported=True)]
    #: A name an acceptance criterion may judge.
    CriterionMetricName = Literal[metric_names(criterion=True)]
    #: A name ``evaluation.disparity_metrics`` may hold: a metric compared between groups (``comparable``),
    #: or a reported one, which the schema's check then refuses with the reason (a clamped square root, or
    #: no sum form) rather than as an unknown name.
    DisparityMetricName = Literal[
        tuple(m.name for m in METRICS if m.comparable or m.reported)  # registry order
    ]
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


# The same policy for the columns of a predictions file. A column is named by whoever exported the file
# (PATIENTNAME, "Patient Name", mrn), so its name is compared normalised (column_name_key): a name that
# means an identifier is refused even with a mapping (IDENTIFYING_COLUMNS, IDENTIFYING_COLUMN_PARTS, and
# the tags refused above, spelt any way: patient_birth_date is PatientBirthDate). Any other column is
# free text to sitecal: it needs a mapping unless its values are few and none looks like an identifier
# (sitecal.cohort.predictions_file.check_subgroup_columns), and its rare values are pooled like a tag's.
#: Normalised column names (see :func:`column_name_key`) that mean an identifier, with what it is.
IDENTIFYING_COLUMNS = {
    **dict.fromkeys(
        """name names fullname patientname patientsname ptname firstname lastname surname givenname
        familyname forename forenames middlename maidenname""".split(),
        "a personal name",
    ),
    **dict.fromkeys(
        """id patient patientid patientsid ptid pid personid subject subjectid patientnumber patientno
        hospitalnumber hospitalno hospitalid caseid caseno studyid examid encounterid visitid admissionid
        otherpatientids""".split(),
        "a patient or study ID",
    ),
    **dict.fromkeys(
        """mrn mr mrno mrnumber umrn medicalrecord medicalrecordnumber medicalrecordno recordnumber
        recordno chartnumber chartno""".split(),
        "a medical record number",
    ),
    **dict.fromkeys(
        "accession accessionnumber accessionno accessionid accno accnumber acc".split(),
        "an accession number",
    ),
    **dict.fromkeys(
        """dob dateofbirth birthdate birthday born patientdob patientbirthdate date datetime studydate
        examdate scandate acquisitiondate admissiondate dischargedate deathdate dateofdeath""".split(),
        "a date",
    ),
    **dict.fromkeys(
        "address streetaddress street postcode postalcode zip zipcode patientaddress".split(), "an address"
    ),
    **dict.fromkeys(
        """phone phonenumber telephone telephonenumber tel mobile mobilenumber cellphone fax email
        emailaddress mail""".split(),
        "a phone number or e-mail address",
    ),
    **dict.fromkeys(
        """uid studyuid studyinstanceuid seriesuid seriesinstanceuid sopuid sopinstanceuid instanceuid
        imageuid""".split(),
        "a UID",
    ),
    **dict.fromkeys(
        """ssn socialsecurity socialsecuritynumber socialsecurityno nationalid nationalidnumber
        nationalidentifier nin nino nhsnumber nhsno insurancenumber insuranceid healthcardnumber passport
        passportnumber taxid""".split(),
        "a national or insurance number",
    ),
}
#: Parts of a normalised column name that mean an identifier wherever they stand (``patient_mrn``,
#: ``referring_physician_email``).
IDENTIFYING_COLUMN_PARTS = {
    "patientname": "a personal name",
    "patientid": "a patient ID",
    "mrn": "a medical record number",
    "medicalrecord": "a medical record number",
    "accession": "an accession number",
    "birthdate": "a date",
    "dateofbirth": "a date",
    "birthday": "a date",
    "instanceuid": "a UID",
    "address": "an address",
    "telephone": "a phone number",
    "phonenumber": "a phone number",
    "email": "an e-mail address",
    "ssn": "a national or insurance number",
    "socialsecurity": "a national or insurance number",
    "nationalid": "a national or insurance number",
}
# What column_name_key removes: the separators people put between the words of a column name
_COLUMN_SEPARATORS = re.compile(r"[_\-. ]+")


def tag_vr(keyword: str) -> str:
    """The VR of a DICOM keyword (the first of an ambiguous ``"US or SS"``)."""
    from pydicom.datadict import dictionary_VR, keyword_dict

    return str(dictionary_VR(keyword_dict[keyword])).split(" or ")[0]


def _refusal(keyword: str) -> str | None:
    """What makes ``keyword`` (a DICOM keyword) never a subgroup (``holds a date (VR DA)``), or ``None``."""
    vr = tag_vr(keyword)
    if vr in REFUSED_VRS:
        return f"holds {REFUSED_VRS[vr]} (VR {vr})"
    if keyword in IDENTIFYING_TAGS:
        return "identifies patients, studies or requests"
    return None


def refused_tag(keyword: str) -> str | None:
    """Why ``keyword`` (a DICOM keyword) can never be a subgroup, even with a mapping; ``None`` if it can."""
    why = _refusal(keyword)
    if why is None:
        return None
    return (
        f"'{keyword}' {why}, so it cannot be a subgroup, even with a mapping: its values would identify "
        f"patients in the outputs. Use one of the tags allowed as subgroups ({_SHOWN_LIST}), or another "
        "tag with a mapping."
    )


def column_name_key(name: str) -> str:
    """A column name as compared with identifiers' names: case-folded, without ``_``, ``-``, ``.``, spaces.

    Examples
    --------
    >>> column_name_key("Patient Name"), column_name_key("ACCESSION_NO."), column_name_key("e-mail")
    ('patientname', 'accessionno', 'email')
    """
    return _COLUMN_SEPARATORS.sub("", name.casefold())


@functools.cache
def _keywords_by_key() -> dict[str, str]:
    """DICOM keywords by their :func:`column_name_key` (``patientbirthdate`` → ``PatientBirthDate``)."""
    from pydicom.datadict import keyword_dict

    return {column_name_key(keyword): keyword for keyword in keyword_dict if keyword}


def refused_column(name: str) -> str | None:
    """Why the predictions file column ``name`` can never be a subgroup, even with a mapping; or ``None``.

    Refused: a name whose :func:`column_name_key` is one of :data:`IDENTIFYING_COLUMNS`, holds one of
    :data:`IDENTIFYING_COLUMN_PARTS`, or spells a DICOM tag that :func:`refused_tag` refuses.

    Examples
    --------
    >>> refused_column("MRN").split(":")[0]
    "column 'MRN' is named like a medical record number"
    >>> refused_column("scanner") is None, refused_column("site_id") is None
    (True, True)
    """
    key = column_name_key(name)
    what = IDENTIFYING_COLUMNS.get(key) or next(
        (why for part, why in IDENTIFYING_COLUMN_PARTS.items() if part in key), None
    )
    if what is None:
        keyword = _keywords_by_key().get(key)
        why = None if keyword is None else _refusal(keyword)
        if keyword is None or why is None:
            return None
        what = f"the DICOM tag {keyword}, which {why}"
    return (
        f"column '{name}' is named like {what}: it cannot be a subgroup, even with a mapping, since its "
        "values would identify patients in the outputs. Remove this subgroup; a subgroup column holds a "
        "group (a site, a scanner, a protocol), and the key, patient and label columns are named under data."
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
