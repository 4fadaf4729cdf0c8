from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from tests.conftest import DEMO_PROTOCOL

from sitecal.cohort import UNKNOWN
from sitecal.cohort.mapping import UNMAPPED, ValueMapping, read_mapping, read_mappings
from sitecal.errors import DataError
from sitecal.protocol import load_protocol

FIELD = "subgroups.site.mapping"


def _csv(tmp_path: Path, text: str, name: str = "stations.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _error(path: Path) -> str:
    """The message of the DataError that reading the mapping file ``path`` raises."""
    with pytest.raises(DataError) as info:
        read_mapping(path, field=FIELD)
    return str(info.value)


def test_values_are_normalised_and_matched_without_case(tmp_path: Path) -> None:
    path = _csv(
        tmp_path, "\ufeffvalue,group,note\nCT01-ER,Emergency,new in 2023\n  ct02   north , Radiology ,\n"
    )
    mapping = read_mapping(path, field=FIELD)
    assert mapping.groups == {"CT01-ER": "Emergency", "ct02 north": "Radiology"}
    assert mapping.group("CT01-ER") == "Emergency"
    assert mapping.group("ct01-er") == "Emergency"
    assert mapping.group("CT02 North") == "Radiology"
    assert mapping.group("CT03") == UNMAPPED
    assert mapping.group(UNKNOWN) == UNKNOWN


def test_repeated_value_with_the_same_group_is_accepted(tmp_path: Path) -> None:
    path = _csv(tmp_path, "value,group\nCT01,Emergency\nct01,Emergency\n")
    assert read_mapping(path, field=FIELD).groups == {"CT01": "Emergency"}


def test_value_given_two_groups_names_both_lines(tmp_path: Path) -> None:
    path = _csv(tmp_path, "value,group\nCT01-ER,Emergency\nCT02,Radiology\nct01-er,ICU\n")
    assert _error(path) == (
        f"{path}:4: value 'ct01-er' is mapped to 'ICU' here and to 'Emergency' on line 2 "
        "(values are compared ignoring case and extra spaces). Keep one row for it."
    )


@pytest.mark.parametrize(
    ("text", "line", "column"),
    [("value,group\nCT01,Emergency\n  ,Radiology\n", 3, "value"), ("value,group\nCT01,\n", 2, "group")],
)
def test_empty_cell_names_line_and_column(tmp_path: Path, text: str, line: int, column: str) -> None:
    path = _csv(tmp_path, text)
    assert _error(path) == f"{path}:{line}: empty '{column}'. Fill it in or delete the row."


def test_missing_column_names_file_columns_and_field(tmp_path: Path) -> None:
    path = _csv(tmp_path, "value,site\nCT01,Emergency\n")
    assert _error(path) == (
        f"{path}:1: no column 'group' (columns: value, site). "
        f"The file named by {FIELD} needs the header 'value,group'."
    )


def test_empty_and_missing_files(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"stations.csv:1: no column 'value' \(columns: none\)"):
        read_mapping(_csv(tmp_path, ""), field=FIELD)
    with pytest.raises(DataError, match=r"stations.csv: the mapping file has a header but no rows\."):
        read_mapping(_csv(tmp_path, "value,group\n"), field=FIELD)
    missing = tmp_path / "nope.csv"
    with pytest.raises(DataError) as info:
        read_mapping(missing, field=FIELD)
    assert str(info.value) == (
        f"{missing}: mapping file not found. Check {FIELD} in the protocol "
        "(a path relative to the protocol file)."
    )


def _protocol(tmp_path: Path, subgroups: dict) -> Path:
    protocol = yaml.safe_load(DEMO_PROTOCOL.read_text())
    protocol["subgroups"].update(subgroups)
    path = tmp_path / "site" / "protocol.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(protocol, sort_keys=False))
    return path


def test_mappings_are_read_relative_to_the_protocol(tmp_path: Path) -> None:
    path = _protocol(
        tmp_path,
        {
            "site": {"tag": "StationName", "mapping": "maps/stations.csv"},
            "sex": {"tag": "PatientSex"},
            "site_sex": {"intersection": ["site", "sex"]},
        },
    )
    (path.parent / "maps").mkdir()
    _csv(path.parent / "maps", "value,group\nCT01-ER,Emergency\n")
    loaded = load_protocol(path)
    mappings = read_mappings(loaded.protocol.subgroups, loaded.resolve)
    assert mappings == {
        "site": ValueMapping(path=path.parent / "maps" / "stations.csv", groups={"CT01-ER": "Emergency"})
    }


def test_missing_mapping_names_the_protocol_field(tmp_path: Path) -> None:
    path = _protocol(tmp_path, {"site": {"tag": "StationName", "mapping": "stations.csv"}})
    loaded = load_protocol(path)
    with pytest.raises(
        DataError, match=r"site/stations.csv: mapping file not found. Check subgroups.site.mapping"
    ):
        read_mappings(loaded.protocol.subgroups, loaded.resolve)
