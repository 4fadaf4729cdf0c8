from __future__ import annotations

import pytest

from sitecal.cohort.attributes import UNKNOWN, age_band, age_band_labels, attribute_value, parse_age_years

EDGES = [0, 40, 60, 80, 200]


@pytest.mark.parametrize(
    ("age", "years"),
    [
        ("045Y", 45.0),
        ("75Y", 75.0),
        ("65", 65.0),
        ("006M", 0.5),
        ("052W", 52 * 7 / 365.25),
        ("010D", 10 / 365.25),
    ],
)
def test_patient_age_forms(age: str, years: float) -> None:
    assert parse_age_years(age) == pytest.approx(years)


def test_age_falls_back_to_dates_and_rejects_nonsense() -> None:
    # 2020-06-01 minus 1970-06-01 is 18,263 days = 50.0 years of 365.25 days
    assert parse_age_years(None, "20200601", "19700601") == pytest.approx(18263 / 365.25)
    assert parse_age_years("abc") is None
    assert parse_age_years("999Y") is None
    assert parse_age_years("", "2020xx01", "19700601") is None


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
