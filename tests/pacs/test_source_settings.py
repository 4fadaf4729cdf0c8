"""data.source in the protocol: what is refused, with the field named, before any retrieval."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError
from tests.conftest import DEMO_PROTOCOL

from sitecal.errors import DataError
from sitecal.pacs._credentials import load_credentials
from sitecal.pacs.retrieve import query_filters
from sitecal.protocol import Protocol
from sitecal.protocol._pacs import DicomwebSource, DimseSource, PacsQuery


def _protocol(data: dict) -> Protocol:
    raw = yaml.safe_load(DEMO_PROTOCOL.read_text())
    raw["data"] = {"labels": "labels.csv", **data}
    return Protocol.model_validate(raw)


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ({"dicom_dir": "d", "source": {"dicomweb": "https://pacs.example/dicom-web"}}, "not both"),
        (
            {"source": {"dicomweb": "http://pacs.example/dicom-web"}},
            "plain http sends studies and credentials",
        ),
        ({"source": {"dicomweb": "https://user:pw@pacs.example/x"}}, "is not an http(s) URL"),
        (
            {"source": {"dimse": {"host": "pacs", "port": 104, "ae_title": "PACS"}, "retrieve": "move"}},
            "retrieve: move needs move_port",
        ),
        (
            {"source": {"dimse": {"host": "pacs", "port": 104, "ae_title": "A\\B"}}},
            "is not an AE title",
        ),
        (
            {
                "source": {
                    "dimse": {"host": "pacs", "port": 104, "ae_title": "PACS"},
                    "retrieve": "move",
                    "move_port": 11112,
                    "tls": {"ca_file": "ca.pem"},
                }
            },
            "retrieve: move over TLS needs tls.cert_file",
        ),
        ({"source": {"url": "https://pacs.example"}}, "give exactly one of 'dicomweb: URL'"),
        ({"source": {"dicomweb": "https://p.example/dw", "password": "x"}}, "Extra inputs are not permitted"),
        ({"source": {"dicomweb": "https://p.example/dw", "max_connections": 99}}, "less than or equal to 16"),
        ({}, "data.source: a PACS to retrieve them from"),
    ],
)
def test_a_bad_source_is_refused_by_field(data: dict, said: str) -> None:
    with pytest.raises(ValidationError) as caught:
        _protocol(data)
    assert said in str(caught.value)


def test_a_dimse_source_is_read_with_its_defaults() -> None:
    protocol = _protocol({"source": {"dimse": {"host": "pacs", "port": 104, "ae_title": "PACS"}}})
    source = protocol.data.source
    assert isinstance(source, DimseSource)
    assert (source.calling_ae, source.retrieve, source.move_port, source.max_connections) == (
        "SITECAL",
        "get",
        None,
        4,
    )


def test_a_loopback_source_runs_the_model_on_the_retrieved_studies() -> None:
    protocol = _protocol({"source": {"dicomweb": "http://127.0.0.1:8042/dicom-web/"}})
    assert isinstance(protocol.data.source, DicomwebSource)
    assert protocol.data.source.dicomweb == "http://127.0.0.1:8042/dicom-web"


def test_the_query_asks_each_alternative_and_intersects_the_fields(tmp_path: Path) -> None:
    worklist = tmp_path / "worklist.csv"
    worklist.write_text("AccessionNumber\nA2\nA1\n\nA2\n")
    query = PacsQuery(
        study_dates=(dt.date(2024, 1, 1), dt.date(2024, 6, 30)),
        modalities=["CR", "DX"],
        accession_numbers="worklist.csv",
        station_names=["XR1"],
    )
    fields = query_filters(query, lambda p: tmp_path / p)
    when = {"StudyDate": "20240101-20240630"}
    assert fields == [
        [{**when, "ModalitiesInStudy": "CR"}, {**when, "ModalitiesInStudy": "DX"}],
        [{**when, "AccessionNumber": "A1"}, {**when, "AccessionNumber": "A2"}],
        [{**when, "StationName": "XR1", "_level": "series"}],
    ]
    assert query_filters(PacsQuery(), Path) == [[{}]]
    worklist.write_text("accession\nA1\n")
    with pytest.raises(DataError, match="needs a column named AccessionNumber"):
        query_filters(query, lambda p: tmp_path / p)
    with pytest.raises(ValidationError, match="first <= last"):
        PacsQuery(study_dates=(dt.date(2024, 2, 1), dt.date(2024, 1, 1)))


def test_credentials_come_from_the_environment_or_an_owner_only_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("SITECAL_PACS_USERNAME", "SITECAL_PACS_PASSWORD", "SITECAL_PACS_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    assert load_credentials(None) is None
    monkeypatch.setenv("SITECAL_PACS_USERNAME", "reader")
    with pytest.raises(DataError, match="set both SITECAL_PACS_USERNAME and SITECAL_PACS_PASSWORD"):
        load_credentials(None)
    monkeypatch.setenv("SITECAL_PACS_PASSWORD", "s3cret")
    creds = load_credentials(None)
    assert creds is not None and (creds.username, creds.password) == ("reader", "s3cret")
    assert "s3cret" not in repr(creds)
    path = tmp_path / "pacs.yaml"
    path.write_text("token: abc\n")
    path.chmod(0o600)
    from_file = load_credentials(path)  # a file given wins over the environment
    assert from_file is not None and from_file.token == "abc" and from_file.username is None
    path.write_text("token: abc\nusername: x\n")
    with pytest.raises(DataError, match="give 'username' and 'password', or 'token'"):
        load_credentials(path)
