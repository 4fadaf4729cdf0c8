"""``report.mlflow``: off by default; a local folder or an https URL; names, run name and tags bounded."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from tests.conftest import DEMO_PROTOCOL

from sitecal.errors import ProtocolError
from sitecal.protocol import load_protocol
from sitecal.run._mlflow import tracking_uri


def _protocol(tmp_path: Path, mlflow: object) -> Path:
    data = yaml.safe_load(DEMO_PROTOCOL.read_text())
    data["report"]["mlflow"] = mlflow
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    return path


def _refusal(tmp_path: Path, mlflow: object) -> str:
    with pytest.raises(ProtocolError) as info:
        load_protocol(_protocol(tmp_path, mlflow))
    return str(info.value)


def test_off_by_default() -> None:
    assert load_protocol(DEMO_PROTOCOL).protocol.report.mlflow is None


def test_a_relative_folder_is_taken_from_the_protocols_folder(tmp_path: Path) -> None:
    loaded = load_protocol(_protocol(tmp_path, {"tracking_uri": "mlruns"}))
    settings = loaded.protocol.report.mlflow
    assert settings is not None
    assert (settings.experiment, settings.run_name, settings.tags) == (None, None, {})
    assert tracking_uri(settings.tracking_uri, loaded.resolve) == (tmp_path / "mlruns").resolve().as_uri()


def test_a_file_uri_and_an_https_server_are_kept(tmp_path: Path) -> None:
    loaded = load_protocol(_protocol(tmp_path, {"tracking_uri": "file:///srv/mlruns"}))
    assert tracking_uri(loaded.protocol.report.mlflow.tracking_uri, loaded.resolve) == "file:///srv/mlruns"
    settings = {
        "tracking_uri": "https://mlflow.example.org/",
        "experiment": "chest triage / go-live",
        "run_name": "Northgate, March",
        "tags": {"site": "Northgate", "ticket": "GOV-12"},
    }
    loaded = load_protocol(_protocol(tmp_path, settings))
    parsed = loaded.protocol.report.mlflow
    assert tracking_uri(parsed.tracking_uri, loaded.resolve) == "https://mlflow.example.org"
    assert (parsed.experiment, parsed.run_name, parsed.tags) == (
        "chest triage / go-live",
        "Northgate, March",
        {"site": "Northgate", "ticket": "GOV-12"},
    )


@pytest.mark.parametrize(
    ("mlflow", "message"),
    [
        ({}, "report.mlflow.tracking_uri: required field is missing"),
        ({"tracking_uri": "mlruns", "uri": "x"}, "report.mlflow.uri: unknown field"),
        ("mlruns", "report.mlflow: Input should be"),
        (
            {"tracking_uri": "sqlite:///mlflow.db"},
            "'sqlite:' tracking stores are not supported: give a local folder",
        ),
        # a scheme that would make MLflow look up a store plugin by name is refused, whatever it is
        ({"tracking_uri": "databricks://profile"}, "'databricks:' tracking stores are not supported"),
        ({"tracking_uri": "sitecal:demo"}, "'sitecal:' tracking stores are not supported"),
        ({"tracking_uri": "http://mlflow.example.org"}, "plain http sends the report and the credentials"),
        ({"tracking_uri": "https://user:secret@mlflow.example.org"}, "no user, query or fragment"),
        ({"tracking_uri": "https://mlflow.example.org/?token=x"}, "no user, query or fragment"),
        ({"tracking_uri": "file:relative/path"}, "is not a file: URI of a local folder"),
        ({"tracking_uri": "https://h", "experiment": ""}, "report.mlflow.experiment:"),
        ({"tracking_uri": "https://h", "run_name": "x" * 201}, "report.mlflow.run_name:"),
        ({"tracking_uri": "https://h", "tags": {"mlflow.user": "x"}}, "reserved"),
        ({"tracking_uri": "https://h", "tags": {"sitecal.verdict": "pass"}}, "reserved"),
        ({"tracking_uri": "https://h", "tags": {"a/b": "x"}}, "tag key 'a/b'"),
        ({"tracking_uri": "https://h", "tags": {"site": ""}}, "tag 'site': its value must be"),
        ({"tracking_uri": "https://h", "tags": {"site": "x" * 501}}, "tag 'site': its value must be"),
        ({"tracking_uri": "https://h", "tags": {f"t{i}": "x" for i in range(21)}}, "report.mlflow.tags:"),
    ],
)
def test_bad_settings_are_refused_with_the_field(tmp_path: Path, mlflow: object, message: str) -> None:
    refusal = _refusal(tmp_path, mlflow)
    assert "report.mlflow" in refusal
    assert message in refusal, refusal


def test_http_on_loopback_is_accepted(tmp_path: Path) -> None:
    loaded = load_protocol(_protocol(tmp_path, {"tracking_uri": "http://127.0.0.1:5000"}))
    assert loaded.protocol.report.mlflow.tracking_uri == "http://127.0.0.1:5000"
