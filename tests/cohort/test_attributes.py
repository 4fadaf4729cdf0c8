from __future__ import annotations

import pytest

from sitecal.cohort.attributes import (
    UNKNOWN,
    age_band,
    age_band_labels,
    attribute_value,
    intersection_value,
    normalise_manufacturer,
    parse_age_years,
)

EDGES = [0, 40, 60, 80, 200]


@pytest.mark.parametrize(
    ("age", "years"),
    [
        # the DICOM AS forms nnnD, nnnW, nnnM, nnnY: units of 1/365.25, 7/365.25, 1/12 and 1 year
        ("045Y", 45.0),
        ("000Y", 0.0),
        ("130Y", 130.0),
        ("006M", 0.5),
        ("003W", 3 * 7 / 365.25),
        ("052W", 52 * 7 / 365.25),
        ("010D", 10 / 365.25),
        (" 045Y ", 45.0),  # padding
        # common non-padded writings
        ("75Y", 75.0),
        ("65", 65.0),
    ],
)
def test_patient_age_forms(age: str, years: float) -> None:
    assert parse_age_years(age) == pytest.approx(years)


@pytest.mark.parametrize(
    "age", ["75 Y", "75y", "", "   ", "abc", "999Y", "131Y", "45.5", "-5Y", "0045Y", "45A"]
)
def test_malformed_patient_age_is_unknown_without_dates(age: str) -> None:
    assert parse_age_years(age) is None
    assert attribute_value("PatientAge", {"PatientAge": age}) == UNKNOWN
    assert attribute_value("PatientAge", {"PatientAge": age}, EDGES) == UNKNOWN


@pytest.mark.parametrize("age", ["75 Y", "75y", "", "abc", "999Y", None])
def test_malformed_patient_age_falls_back_to_dates(age: str | None) -> None:
    # born 1945-03-10, studied 2020-06-01: the 75th birthday has passed
    assert parse_age_years(age, "20200601", "19450310") == 75.0


def test_patient_age_wins_over_dates() -> None:
    assert parse_age_years("045Y", "20200601", "19450310") == 45.0


@pytest.mark.parametrize(
    ("study", "birth", "years"),
    [
        ("20200601", "19700601", 50.0),  # the birthday itself
        ("20200531", "19700601", 49.0),  # the day before
        ("20220601", "19720601", 50.0),  # 18,262 days: 49.9986 years of 365.25 days, still 50 whole years
        ("20200101", "19701231", 49.0),  # birthday at the end of the study year, not yet reached
        ("20201231", "19700101", 50.0),
        ("20230228", "20000229", 22.0),  # born on 29 February: in a common year the birthday is 1 March
        ("20230301", "20000229", 23.0),
        ("20240229", "20000229", 24.0),
        ("20200601", "20200601", 0.0),
        ("20200601", "20200315", 0.0),
    ],
)
def test_age_from_dates_counts_whole_years(study: str, birth: str, years: float) -> None:
    assert parse_age_years(None, study, birth) == years


def test_age_from_dates_whole_years_decide_the_band() -> None:
    values = {"StudyDate": "20220601", "PatientBirthDate": "19820601"}  # 40 today
    assert attribute_value("PatientAge", values, EDGES) == "40–59"
    assert attribute_value("PatientAge", values) == "40"


@pytest.mark.parametrize(
    ("study", "birth"),
    [
        ("20200601", "20200602"),  # born after the study
        ("2020xx01", "19700601"),
        ("20200601", ""),
        ("", "19700601"),
        ("20201301", "19700601"),  # month 13
        ("202006", "19700601"),
        ("20200601", "17000101"),  # 320 years
    ],
)
def test_age_from_unusable_dates_is_unknown(study: str, birth: str) -> None:
    assert parse_age_years(None, study, birth) is None
    values = {"StudyDate": study, "PatientBirthDate": birth}
    assert attribute_value("PatientAge", values, EDGES) == UNKNOWN


def test_age_band_edges_are_half_open() -> None:
    assert age_band_labels(EDGES) == ["0–39", "40–59", "60–79", "80+"]
    assert age_band(39.99, EDGES) == "0–39"
    assert age_band(40.0, EDGES) == "40–59"
    assert age_band(80.0, EDGES) == "80+"
    assert age_band(None, EDGES) == UNKNOWN


def test_attribute_values_normalised() -> None:
    values = {"ManufacturerModelName": "  Acme   X100 ", "PatientSex": "f", "PatientAge": "063Y"}
    assert attribute_value("ManufacturerModelName", values) == "Acme X100"
    assert attribute_value("PatientSex", values) == "F"
    assert attribute_value("PatientAge", values, EDGES) == "60–79"
    assert attribute_value("InstitutionName", values) == UNKNOWN
    assert attribute_value("PatientSex", {"PatientSex": "X"}) == UNKNOWN


@pytest.mark.parametrize(
    ("manufacturer", "vendor"),
    [
        ("SIEMENS", "Siemens"),
        ("Siemens Healthineers", "Siemens"),
        ("Siemens Healthcare GmbH", "Siemens"),
        (" siemens ", "Siemens"),
        ("GE MEDICAL SYSTEMS", "GE"),
        ("GE Healthcare", "GE"),
        ("GE", "GE"),
        ("GE HEALTHCARE JAPAN", "GE"),
        ("Philips Medical Systems", "Philips"),
        ("Philips Healthcare", "Philips"),
        ("PHILIPS", "Philips"),
        ("Canon Medical Systems", "Canon/Toshiba"),
        ("TOSHIBA_MEC", "Canon/Toshiba"),
        ("Toshiba", "Canon/Toshiba"),
        ("FUJIFILM Corporation", "Fujifilm"),
        ("FUJI PHOTO FILM Co., ltd.", "Fujifilm"),
        ("Carestream Health", "Carestream/Kodak"),
        ("KODAK", "Carestream/Kodak"),
        ("Agfa-Gevaert", "Agfa"),
        ("AGFA", "Agfa"),
        ("KONICA MINOLTA", "Konica Minolta"),
        ("Konica Minolta Medical & Graphic, Inc.", "Konica Minolta"),
        ("HOLOGIC, Inc.", "Hologic"),
        ("Samsung Medison", "Samsung"),
        ("SAMSUNG ELECTRONICS", "Samsung"),
    ],
)
def test_manufacturer_aliases_name_one_vendor(manufacturer: str, vendor: str) -> None:
    assert normalise_manufacturer(manufacturer) == vendor
    assert attribute_value("Manufacturer", {"Manufacturer": manufacturer}) == vendor


@pytest.mark.parametrize(
    ("manufacturer", "kept"),
    [
        ("  Acme   Imaging ", "Acme Imaging"),
        ("Generic Imaging", "Generic Imaging"),  # 'ge' matches whole words only
        ("GEMINI Corp", "GEMINI Corp"),
        ("Philipsburg Clinic", "Philipsburg Clinic"),
    ],
)
def test_unknown_manufacturer_keeps_its_text(manufacturer: str, kept: str) -> None:
    assert normalise_manufacturer(manufacturer) == kept


@pytest.mark.parametrize("manufacturer", [None, "", "   ", " .,; "])
def test_missing_manufacturer_is_unknown(manufacturer: str | None) -> None:
    assert normalise_manufacturer(manufacturer) == UNKNOWN
    values = {} if manufacturer is None else {"Manufacturer": manufacturer}
    assert attribute_value("Manufacturer", values) == UNKNOWN


def test_other_tags_are_not_vendor_normalised() -> None:
    assert attribute_value("InstitutionName", {"InstitutionName": "SIEMENS"}) == "SIEMENS"


def test_intersection_joins_components_and_unknown_wins() -> None:
    assert intersection_value(["F", "40–59"]) == "F × 40–59"
    assert intersection_value(["F", "40–59", "Siemens"]) == "F × 40–59 × Siemens"
    assert intersection_value(["F", UNKNOWN]) == UNKNOWN
    assert intersection_value([UNKNOWN, "40–59"]) == UNKNOWN
