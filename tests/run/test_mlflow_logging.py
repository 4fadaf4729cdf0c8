"""``report.mlflow``: a sealed run folder logged to a local MLflow file store and read back.

Every number logged is one of ``metrics.csv``; the per-study tables are never logged; a folder edited after
its seal is refused; a store that cannot take the run is a warning, and MLflow's own output stays off the
console. Uses the shared ``small_run`` folder (read only; a test that spoils it spoils a copy).
"""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import os
import shutil
import sys
from pathlib import Path

# the test extra installs mlflow-skinny (.ci/run): a missing package fails here, never skips
import pytest

from sitecal.errors import SealError
from sitecal.protocol import LoadedProtocol, load_protocol
from sitecal.run._mlflow import (
    MLFLOW_MISSING,
    log_after_run,
    log_to_mlflow,
    metric_key,
    mlflow_problems,
)
from sitecal.run.preflight import preflight

PER_STUDY = {"cohort.csv", "predictions.csv", "exclusions.csv"}
LOGGED = {"report.pdf", "evaluation.json", "calibration.json", "provenance.json", "metrics.csv", "seal.json"}


def _client(store: Path) -> object:
    from mlflow.tracking import MlflowClient

    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"  # restored by the fixture below
    return MlflowClient(tracking_uri=store.as_uri())


@pytest.fixture(autouse=True)
def _mlflow_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MLFLOW_ALLOW_FILE_STORE", "MLFLOW_TRACKING_URI", "MLFLOW_HTTP_REQUEST_MAX_RETRIES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")


@pytest.fixture(scope="module")
def logged(small_run: dict, tmp_path_factory: pytest.TempPathFactory) -> dict:
    store = tmp_path_factory.mktemp("mlflow") / "store"
    saved = dict(os.environ)
    try:
        os.environ.pop("MLFLOW_ALLOW_FILE_STORE", None)
        result = log_to_mlflow(small_run["folder"], tracking_uri=store.as_uri(), tags={"site": "Northgate"})
        environment_after = dict(os.environ)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return {"result": result, "store": store, "environment_after": environment_after}


def _rows(folder: Path) -> list[dict[str, str]]:
    with open(folder / "metrics.csv", newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_every_number_of_metrics_csv_is_logged_under_its_key(small_run: dict, logged: dict) -> None:
    run = _client(logged["store"]).get_run(logged["result"].run_id)
    rows = _rows(small_run["folder"])
    expected = {
        metric_key(r["attribute"], r["group"], r["metric"], r["stage"], column): float(r[column])
        for r in rows
        for column in ("estimate", "low", "high", "n")
    }
    assert len(expected) == 4 * len(rows)  # one key per number: no two rows collide
    assert run.data.metrics == expected
    overall = next(
        r for r in rows if (r["attribute"], r["metric"], r["stage"]) == ("overall", "ece", "after")
    )
    assert run.data.metrics["ece.after.overall.estimate"] == float(overall["estimate"])
    scanner = next(
        r for r in rows if (r["attribute"], r["metric"], r["stage"]) == ("scanner", "nll", "before")
    )
    key = f"nll.before.scanner.{scanner['group']}.high"  # demo scanner names are kept as they are
    assert run.data.metrics[key] == float(scanner["high"])


def test_parameters_and_tags_are_the_sealed_documents(small_run: dict, logged: dict) -> None:
    folder = small_run["folder"]
    run = _client(logged["store"]).get_run(logged["result"].run_id)
    evaluation = json.loads((folder / "evaluation.json").read_text(encoding="utf-8"))
    provenance = json.loads((folder / "provenance.json").read_text(encoding="utf-8"))
    params = run.data.params
    assert params["protocol.name"] == evaluation["protocol"]["name"] == "demo"
    assert params["protocol.sha256"] == evaluation["protocol"]["sha256"]
    assert params["sha256.model"] == provenance["sha256"]["model"]
    assert params["calibration.method"] == "temperature"
    assert params["calibration.per"] == evaluation["calibration_attribute"]
    assert params["bootstrap.n_resamples"] == str(evaluation["bootstrap"]["n_resamples"]) == "50"
    assert params["bootstrap.seed"] == str(evaluation["bootstrap"]["seed"])
    assert params["bootstrap.level"] == str(evaluation["bootstrap"]["level"])
    assert params["sitecal.version"] == provenance["sitecal_version"]
    assert params["document_id"] == provenance["document_id"]
    tags = run.data.tags
    assert tags["sitecal.verdict"] == evaluation["verdict"]
    assert tags["sitecal.document_id"] == provenance["document_id"]
    assert tags["site"] == "Northgate"
    assert run.info.run_name == folder.name
    assert run.info.status == "FINISHED"
    experiment = _client(logged["store"]).get_experiment(run.info.experiment_id)
    assert experiment.name == "demo"  # the protocol's name, by default


def test_the_documents_are_logged_byte_for_byte_and_no_per_study_table(
    small_run: dict, logged: dict, tmp_path: Path
) -> None:
    client = _client(logged["store"])
    run_id = logged["result"].run_id
    listed = {a.path for a in client.list_artifacts(run_id)}
    present = {p.name for p in small_run["folder"].iterdir()}
    assert listed == LOGGED | ({"report.html"} & present)  # the HTML report where the run wrote one
    assert not listed & PER_STUDY
    assert PER_STUDY <= present  # they were there to leave out
    copy = Path(client.download_artifacts(run_id, "", str(tmp_path)))
    for name in listed:
        assert (copy / name).read_bytes() == (small_run["folder"] / name).read_bytes(), name


def test_the_environment_and_mlflows_logger_are_restored(logged: dict) -> None:
    after = logged["environment_after"]
    assert "MLFLOW_ALLOW_FILE_STORE" not in after
    assert "MLFLOW_HTTP_REQUEST_TIMEOUT" not in after or "MLFLOW_HTTP_REQUEST_TIMEOUT" in os.environ
    handlers = logging.getLogger("mlflow").handlers
    assert not any(type(h).__name__ == "_Relay" for h in handlers)


def test_nothing_reaches_the_console(
    small_run: dict, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    log_to_mlflow(small_run["folder"], tracking_uri=(tmp_path / "store").as_uri())
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")


def test_the_run_id_goes_to_the_log(
    small_run: dict, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    loaded = _with_mlflow(
        small_run, tmp_path, {"tracking_uri": str(tmp_path / "store"), "experiment": "go-live"}
    )
    with caplog.at_level(logging.INFO, logger="sitecal"):
        result = log_after_run(loaded, small_run["folder"])
    assert result is not None
    assert f"run {result.run_id} in experiment {result.experiment_id}" in caplog.text
    assert _client(tmp_path / "store").get_experiment_by_name("go-live").experiment_id == result.experiment_id


def test_a_folder_edited_after_its_seal_is_refused_and_nothing_is_logged(
    small_run: dict, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "reports" / small_run["folder"].name
    shutil.copytree(small_run["folder"], folder)
    table = folder / "metrics.csv"
    table.write_text(table.read_text(encoding="utf-8").replace(",ece,after,0.", ",ece,after,1.", 1))
    store = tmp_path / "store"
    with pytest.raises(SealError, match=r"metrics\.csv: edited after the run sealed it"):
        log_to_mlflow(folder, tracking_uri=store.as_uri())
    assert not store.exists()
    loaded = _with_mlflow(small_run, tmp_path, {"tracking_uri": str(store)})
    with caplog.at_level(logging.INFO, logger="sitecal"):
        assert log_after_run(loaded, folder) is None
    assert "was not logged to MLflow" in caplog.text and "edited after the run sealed it" in caplog.text
    assert not store.exists()


def test_a_store_that_cannot_be_written_is_a_warning(
    small_run: dict, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    store = blocker / "store"  # its parent is a file: no account can make it (root included)
    loaded = _with_mlflow(small_run, tmp_path, {"tracking_uri": str(store)})
    with caplog.at_level(logging.WARNING, logger="sitecal"):
        assert log_after_run(loaded, small_run["folder"]) is None
    (record,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert record.name == "sitecal.run._mlflow"
    assert f"the run was not logged to MLflow at {store.as_uri()}" in record.getMessage()
    assert "Check that this account may write to that folder" in record.getMessage()
    assert "its verdict stands" in record.getMessage()


def test_a_server_that_does_not_answer_is_a_warning_within_the_bounds(
    small_run: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # the site's own setting is kept
    loaded = _with_mlflow(
        small_run, tmp_path, {"tracking_uri": "http://127.0.0.1:9"}
    )  # discard port: refused
    with caplog.at_level(logging.WARNING, logger="sitecal"):
        assert log_after_run(loaded, small_run["folder"]) is None
    warning = next(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert "not logged to MLflow at http://127.0.0.1:9" in warning
    assert "Check that the server is up and reachable" in warning
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "0"


@pytest.mark.parametrize(
    ("group", "expected"),
    [
        ("GE Signa", "GE Signa"),
        ("DRX-1_b", "DRX-1_b"),
        ("St. Mary's", "St_Mary_s-" + hashlib.sha256(b"St. Mary's").hexdigest()[:8]),
        ("../etc", "etc-" + hashlib.sha256(b"../etc").hexdigest()[:8]),
        ("", "_-" + hashlib.sha256(b"").hexdigest()[:8]),
        (" padded", "padded-" + hashlib.sha256(b" padded").hexdigest()[:8]),
    ],
)
def test_a_group_name_is_kept_or_made_safe_and_tagged_with_its_hash(group: str, expected: str) -> None:
    assert metric_key("site", group, "ece", "after", "estimate") == f"ece.after.site.{expected}.estimate"


def test_keys_are_collision_free_bounded_and_mlflow_valid() -> None:
    from mlflow.utils.validation import _validate_metric_name

    groups = ["A B", "A_B", "A.B", "A/B", "A\u00d7B", "AxB", "x" * 64, "x" * 65, "x" * 500, "y" * 500 + "!"]
    keys = [metric_key("sex_age", g, "ece_debiased", "difference", "estimate") for g in groups]
    assert len(set(keys)) == len(keys)
    for key in keys:
        assert len(key) <= 250
        _validate_metric_name(key)  # raises on a key MLflow would refuse


def test_check_and_run_refuse_report_mlflow_without_the_package(
    small_run: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from sitecal.cli import main

    path = _protocol_file(small_run, tmp_path, {"tracking_uri": "mlruns"})
    _hide_mlflow(monkeypatch)
    loaded = load_protocol(path)
    assert mlflow_problems(loaded) == [f"{MLFLOW_MISSING}, or remove report.mlflow from the protocol."]
    assert f"{MLFLOW_MISSING}, or remove" in "\n".join(preflight(loaded).problems)
    for command in (["check", str(path)], ["run", str(path), "--no-progress"]):
        assert main(command) == 2
        assert f"{MLFLOW_MISSING}, or remove report.mlflow from the protocol." in capsys.readouterr().err
    assert not (tmp_path / "reports").exists()  # refused before any run folder


def test_a_run_without_the_package_warns_and_stands(
    small_run: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    loaded = _with_mlflow(small_run, tmp_path, {"tracking_uri": str(tmp_path / "store")})
    _hide_mlflow(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="sitecal"):
        assert log_after_run(loaded, small_run["folder"]) is None
    assert f"{MLFLOW_MISSING}." in caplog.text
    assert not (tmp_path / "store").exists()


def _hide_mlflow(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "mlflow" or m.startswith("mlflow.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "mlflow", None)  # `import mlflow` raises ImportError


def test_check_refuses_a_store_folder_outside_the_protocols_tree(small_run: dict, tmp_path: Path) -> None:
    loaded = load_protocol(_protocol_file(small_run, tmp_path, {"tracking_uri": "/"}))
    (problem,) = mlflow_problems(loaded)
    assert problem.startswith("report.mlflow.tracking_uri: / is outside the protocol's folder")
    assert "--allow-output-anywhere" in problem
    assert not any("outside" in p for p in mlflow_problems(loaded, allow_anywhere=True))


def _protocol_file(small_run: dict, tmp_path: Path, mlflow: dict) -> Path:
    import yaml

    data = yaml.safe_load(Path(small_run["protocol"]).read_text(encoding="utf-8"))
    data["report"]["output_dir"] = "reports"
    data["report"]["mlflow"] = mlflow
    path = tmp_path / "protocol.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


def _with_mlflow(small_run: dict, tmp_path: Path, mlflow: dict) -> LoadedProtocol:
    """The small run's protocol (its key file with it) with ``report.mlflow`` set, read from a file."""
    return load_protocol(_protocol_file(small_run, tmp_path, mlflow))


@pytest.mark.slow
def test_a_run_logs_itself_after_the_seal_and_stays_sealed(tmp_path: Path) -> None:
    from tests.conftest import PATIENT_SPLIT, assert_exit_is_the_verdicts, write_demo_protocol

    from sitecal.cli import main
    from sitecal.demo import generate_demo
    from sitecal.run.sealed import open_run

    manifest = generate_demo(tmp_path / "data", n_studies=80, seed=5)
    protocol = write_demo_protocol(
        tmp_path,
        manifest,
        n_resamples=50,
        inputs={"num_workers": 0},
        calibration={"min_group_size": 10, "split": PATIENT_SPLIT},
        report={"mlflow": {"tracking_uri": "mlruns", "run_name": "first"}},
    )
    code = main(["run", str(protocol), "--no-progress", "--workers", "1"])
    (folder,) = (tmp_path / "reports").glob("demo-*")
    assert_exit_is_the_verdicts(code, folder)
    open_run(folder)  # the log grew; nothing else in the folder changed
    client = _client(tmp_path / "mlruns")
    (run,) = client.search_runs([client.get_experiment_by_name("demo").experiment_id])
    assert run.info.run_name == "first" and run.info.status == "FINISHED"
    assert f"run {run.info.run_id} in experiment" in (folder / "run.log").read_text(encoding="utf-8")
