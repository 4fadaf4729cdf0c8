"""write_document / read_document: the bytes write_json_atomic writes, checked on the way out and in."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.results import synthetic

from sitecal._io import write_json_atomic
from sitecal.calibration import GroupTemperatures, fit_group_temperatures
from sitecal.errors import DataError
from sitecal.results import (
    CalibrationDocument,
    ClassCount,
    CohortFlow,
    Evaluation,
    Interval,
    read_document,
    write_document,
)

SHA = "ab" * 32


@pytest.fixture(scope="module")
def evaluation() -> Evaluation:
    result: Evaluation = synthetic.document().result
    return result


def _temperatures(fallback: str = "global") -> GroupTemperatures:
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(300, 3)) * 3
    labels = rng.integers(0, 3, 300)
    groups = np.array(["A"] * 200 + ["B"] * 70 + ["C"] * 30)
    return fit_group_temperatures(logits, labels, groups, min_group_size=50, fallback=fallback)  # type: ignore[arg-type]


def calibration(fallback: str = "global") -> CalibrationDocument:
    """calibration.json as sitecal.run builds it: the run's settings, then GroupTemperatures.to_dict()."""
    temps = _temperatures(fallback)
    return CalibrationDocument.from_dict(
        {
            "schema_version": 1,
            "method": "temperature",
            "per": "scanner",
            "class_names": ["normal", "nodule", "effusion"],
            "model_sha256": SHA,
            **temps.to_dict(),
        }
    )


def test_the_file_is_what_write_json_atomic_writes(evaluation: Evaluation, tmp_path: Path) -> None:
    write_document(tmp_path / "evaluation.json", evaluation)
    write_json_atomic(tmp_path / "old.json", synthetic.document().document)
    assert (tmp_path / "evaluation.json").read_bytes() == (tmp_path / "old.json").read_bytes()
    assert read_document(tmp_path / "evaluation.json", Evaluation) == evaluation


@pytest.mark.parametrize("fallback", ["global", "shrink"])
def test_calibration_json_reads_back_and_deployment_still_loads_it(fallback: str, tmp_path: Path) -> None:
    doc = calibration(fallback)
    assert {g.source for g in doc.groups.values()} == {
        "own",
        "global_fallback" if fallback == "global" else "shrunk",
    }
    write_document(tmp_path / "calibration.json", doc)
    assert read_document(tmp_path / "calibration.json", CalibrationDocument) == doc
    data = json.loads((tmp_path / "calibration.json").read_text())
    assert list(doc.to_dict())[:5] == ["schema_version", "method", "per", "class_names", "model_sha256"]
    assert GroupTemperatures.from_dict(data).to_dict() == _temperatures(fallback).to_dict()


def test_nothing_invalid_is_written(evaluation: Evaluation, tmp_path: Path) -> None:
    bad = dataclasses.replace(evaluation, overall=dataclasses.replace(evaluation.overall, n_patients=-1))
    with pytest.raises(
        DataError, match=re.escape("evaluation.json: $.overall.n_patients: expected a number >= 0")
    ):
        write_document(tmp_path / "evaluation.json", bad)
    assert not list(tmp_path.iterdir())


def test_a_nan_is_refused_on_the_way_out_and_in(evaluation: Evaluation, tmp_path: Path) -> None:
    metrics = dict(evaluation.overall.metrics)
    metrics["ece"] = dataclasses.replace(
        metrics["ece"], after=Interval(estimate=0.1, low=float("nan"), high=0.2)
    )
    bad = dataclasses.replace(evaluation, overall=dataclasses.replace(evaluation.overall, metrics=metrics))
    with pytest.raises(
        DataError, match=re.escape("$.overall.metrics.ece.after.low: expected a finite number, got NaN")
    ):
        write_document(tmp_path / "evaluation.json", bad)
    (tmp_path / "nan.json").write_text(json.dumps(bad.to_dict()))  # Python's json writes NaN; JSON has none
    with pytest.raises(DataError, match=r"nan\.json: not valid JSON \(NaN is not a JSON number"):
        read_document(tmp_path / "nan.json", Evaluation)


def test_read_errors_name_the_file_and_the_next_step(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"missing\.json: cannot read it .*Pass the file the run wrote\."):
        read_document(tmp_path / "missing.json", Evaluation)
    (tmp_path / "broken.json").write_text('{"schema_version": 1,')
    with pytest.raises(DataError, match=r"broken\.json: not valid JSON .*Restore the file the run wrote\."):
        read_document(tmp_path / "broken.json", Evaluation)
    doc = calibration().to_dict()
    doc["schema_version"] = 7
    (tmp_path / "calibration.json").write_text(json.dumps(doc))
    with pytest.raises(
        DataError,
        match=re.escape(
            f"{tmp_path / 'calibration.json'}: $.schema_version: schema_version 7 is not supported by this "
            "sitecal (it reads schema_version 1 of CalibrationDocument). Read the file with the sitecal "
            "version that wrote it, or write it again with this one."
        ),
    ):
        read_document(tmp_path / "calibration.json", CalibrationDocument)


def test_the_codec_keeps_ints_and_json_keys() -> None:
    # an int where a float is expected stays an int, so a document reads back to the same bytes
    assert Interval.from_dict({"estimate": 1, "low": 0.5, "high": 2}).to_dict() == {
        "estimate": 1,
        "low": 0.5,
        "high": 2,
    }
    assert ClassCount.from_dict({"class": "nodule", "count": 2, "share": 0.5}) == ClassCount(
        class_name="nodule", count=2, share=0.5
    )
    with pytest.raises(DataError, match=re.escape("ClassCount: $.class_name: is not a field of this object")):
        ClassCount.from_dict({"class_name": "nodule", "count": 2, "share": 0.5})


def test_absent_keys_stay_absent() -> None:
    flow: dict[str, Any] = {k: v for k, v in synthetic.FLOW.items() if k != "sources"} | {
        "fit": 1,
        "evaluation": 2,
    }
    parsed = CohortFlow.from_dict(flow)
    assert parsed.sources is None and parsed.to_dict() == flow
    assert "sources" not in parsed.to_dict() and "model_failed" not in parsed.to_dict()
    with pytest.raises(
        DataError, match=re.escape("CohortFlow: $.model_failed: expected an integer, got null")
    ):
        CohortFlow.from_dict(flow | {"model_failed": None})


@pytest.mark.parametrize("cls", [Evaluation, CalibrationDocument])
def test_the_report_fixtures_are_valid_documents(cls: Any) -> None:
    # tests/report/fixtures/make_fixtures.py builds them as typed documents; this keeps the files honest
    path = Path(__file__).parents[1] / "report" / "fixtures" / cls.FILE_NAME
    assert read_document(path, cls).to_dict() == json.loads(path.read_text(encoding="utf-8"))
