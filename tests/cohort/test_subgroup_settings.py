"""The subgroup section of the protocol: tags, mappings and intersections (validated in sitecal.protocol)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sitecal.errors import ProtocolError
from sitecal.protocol import SubgroupSettings, load_protocol


def _load(tmp_path: Path, demo_protocol_text: str, subgroups: str) -> str:
    start = demo_protocol_text.index("subgroups:\n")
    end = demo_protocol_text.index("\ncalibration:")
    text = demo_protocol_text[:start] + "subgroups:\n" + subgroups + demo_protocol_text[end:]
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(ProtocolError) as info:
        load_protocol(path)
    return str(info.value)


def _line(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


GOOD = """\
  scanner: {tag: ManufacturerModelName}
  site: {tag: StationName, mapping: stations.csv}
  sex: {tag: PatientSex}
  age_band: {tag: PatientAge, bands: [0, 40, 60, 80, 200]}
  sex_age: {intersection: [sex, age_band], label: Sex × age band}
"""


def test_intersection_and_mapping_load(tmp_path: Path, demo_protocol_text: str) -> None:
    start = demo_protocol_text.index("subgroups:\n")
    end = demo_protocol_text.index("\ncalibration:")
    path = tmp_path / "p.yaml"
    path.write_text(demo_protocol_text[:start] + "subgroups:\n" + GOOD + demo_protocol_text[end:])
    subgroups = load_protocol(path).protocol.subgroups
    assert subgroups["sex_age"] == SubgroupSettings(intersection=["sex", "age_band"], label="Sex × age band")
    assert subgroups["sex_age"].tag is None
    assert subgroups["site"].mapping == "stations.csv"


@pytest.mark.parametrize(
    "entry",
    [
        "{label: Sex × age band}",
        "{tag: PatientSex, intersection: [sex, age_band]}",
    ],
)
def test_exactly_one_of_tag_and_intersection(tmp_path: Path, demo_protocol_text: str, entry: str) -> None:
    message = _load(
        tmp_path,
        demo_protocol_text,
        GOOD.replace("{intersection: [sex, age_band], label: Sex × age band}", entry),
    )
    assert (
        "subgroups.sex_age: give exactly one of 'tag' (a DICOM keyword), 'column' (a column of "
        "data.predictions) or 'intersection' (a list of two or more other subgroups)" in message
    )


@pytest.mark.parametrize(
    ("intersection", "problem"),
    [
        ("[sex]", "an intersection combines two or more subgroups, e.g. [sex, age_band]. Got ['sex']"),
        ("[sex, sex]", "an intersection names each subgroup once. Got ['sex', 'sex']"),
    ],
)
def test_intersection_shape(tmp_path: Path, demo_protocol_text: str, intersection: str, problem: str) -> None:
    message = _load(tmp_path, demo_protocol_text, GOOD.replace("[sex, age_band]", intersection))
    assert f"subgroups.sex_age.intersection: {problem}" in message


@pytest.mark.parametrize("option", ["bands: [0, 40]", "mapping: groups.csv"])
def test_intersection_takes_no_bands_or_mapping(tmp_path: Path, demo_protocol_text: str, option: str) -> None:
    message = _load(tmp_path, demo_protocol_text, GOOD.replace("label: Sex × age band", option))
    name = option.split(":")[0]
    assert (
        f"subgroups.sex_age: '{name}' applies to a tag or column; an intersection combines the values of "
        f"its subgroups as they are. Put '{name}' on the subgroups it combines." in message
    )


def test_intersection_of_an_unknown_subgroup_is_located(tmp_path: Path, demo_protocol_text: str) -> None:
    subgroups = GOOD.replace(
        "{intersection: [sex, age_band], label: Sex × age band}",
        "\n    intersection:\n      - sex\n      - age_bnd",
    )
    message = _load(tmp_path, demo_protocol_text, subgroups)
    text = (tmp_path / "p.yaml").read_text()
    assert message.startswith(
        f"{tmp_path / 'p.yaml'}:{_line(text, '- age_bnd')}: subgroups.sex_age.intersection.1: "
        "'age_bnd' is not a subgroup defined under 'subgroups' "
    )
    assert "Did you mean 'age_band'?" in message


def test_intersection_of_an_intersection(tmp_path: Path, demo_protocol_text: str) -> None:
    subgroups = GOOD + "  nested: {intersection: [scanner, sex_age]}\n"
    message = _load(tmp_path, demo_protocol_text, subgroups)
    assert (
        "subgroups.nested.intersection.1: 'sex_age' is itself an intersection (of sex, age_band). "
        "List tag subgroups instead: [scanner, sex, age_band]." in message
    )


def test_intersection_of_itself(tmp_path: Path, demo_protocol_text: str) -> None:
    message = _load(tmp_path, demo_protocol_text, GOOD.replace("[sex, age_band]", "[sex, sex_age]"))
    assert (
        "subgroups.sex_age.intersection.1: 'sex_age' is itself an intersection (of sex, sex_age)." in message
    )


def test_mapping_must_be_a_csv_path(tmp_path: Path, demo_protocol_text: str) -> None:
    message = _load(tmp_path, demo_protocol_text, GOOD.replace("mapping: stations.csv", "mapping: ''"))
    assert "subgroups.site.mapping: give the path of a CSV file with the columns 'value,group'" in message


@pytest.mark.parametrize(
    ("column", "allowed"),
    [("hospital", True), ("Manufacturer", True), ("PatientName", False), ("AccessionNumber", False)],
)
def test_a_column_named_like_a_tag_follows_that_tag_s_policy(column: str, allowed: bool) -> None:
    from pydantic import ValidationError

    from sitecal.protocol import SubgroupSettings

    if allowed:
        assert SubgroupSettings(column=column).column == column
    else:
        with pytest.raises(ValidationError, match=f"column '{column}'"):
            SubgroupSettings(column=column)
