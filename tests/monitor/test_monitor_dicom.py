"""``sitecal monitor`` on DICOM studies: the validated model run here, each study dated by its StudyDate.

The baseline is the shared small demo run (``small_run``: 160 DICOM studies, per-scanner temperatures).
The monitor reads a copy of its folder with half the labels given: unlabelled studies are monitored in the
label-free part, a study whose StudyDate is missing or in the future is an exclusion with that reason, the
windows are the StudyDates' quarters as pydicom reads them, and a model other than the validated one is
refused by ``check`` and ``monitor`` before any study is read.
"""

from __future__ import annotations

import csv
import datetime as dt
import shutil
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pydicom
import pytest
import yaml
from tests.conftest import without_data_uris

from sitecal.cli import main
from sitecal.monitor import OVERALL
from sitecal.results import MonitoringDocument, read_document


def _quarter(date: str) -> str:
    day = dt.date(int(date[:4]), int(date[4:6]), int(date[6:8]))
    return f"{day.year}-Q{(day.month - 1) // 3 + 1}"


@pytest.fixture(scope="module")
def site(small_run: dict, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A copy of the small run's studies (two StudyDates spoiled) and labels (every second row kept)."""
    root = tmp_path_factory.mktemp("monitor-dicom")
    manifest = small_run["manifest"]
    dicom = root / "dicom"
    shutil.copytree(manifest.dicom_dir, dicom)
    headers = {}
    for path in sorted(dicom.rglob("*.dcm")):
        try:
            ds = pydicom.dcmread(path, stop_before_pixels=True)
        except Exception:  # the demo plants unreadable files: the scan excludes them, as here
            continue
        headers.setdefault(str(ds.StudyInstanceUID), []).append((path, ds))
    studies = sorted(uid for uid, files in headers.items() if len(files) == 1)
    # a name typed into StudyDate (never shown), and a date after today
    spoiled = {
        studies[0]: "DOE^JANE",
        studies[1]: (dt.date.today() + dt.timedelta(days=40)).strftime("%Y%m%d"),
    }
    for uid, date in spoiled.items():
        ((path, _),) = headers[uid]
        ds = pydicom.dcmread(path)
        with warnings.catch_warnings():  # pydicom warns of the invalid date it is asked to write
            warnings.simplefilter("ignore")
            ds.StudyDate = date
            ds.save_as(path)
    with Path(manifest.labels_csv).open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    labels = root / "labels.csv"
    with labels.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows[::2])
    return {
        "root": root,
        "dicom": dicom,
        "labels": labels,
        "labelled": {r["StudyInstanceUID"] for r in rows[::2]},
        "dates": {uid: str(files[0][1].get("StudyDate", "")) for uid, files in headers.items()},
        "spoiled": set(spoiled),
    }


def _protocol(small_run: dict, site: dict, folder: Path, **changes: object) -> Path:
    protocol = yaml.safe_load(Path(small_run["protocol"]).read_text())
    protocol["name"] = "demo-monitor-dicom"
    protocol["data"] |= {"dicom_dir": str(site["dicom"]), "labels": str(site["labels"])}
    protocol["report"]["output_dir"] = str(folder / "reports")
    protocol["monitoring"] = {
        "baseline": str(small_run["folder"]),
        "window": "quarter",
        "output_dir": str(folder / "monitoring"),
    }
    for key, value in changes.items():
        section, _, field = key.partition("__")
        if value is None:
            protocol[section].pop(field, None)
        else:
            protocol[section][field] = value
    path = folder / "monitor.yaml"
    path.write_text(yaml.safe_dump(protocol, sort_keys=False))
    return path


def _document(folder: Path) -> MonitoringDocument:
    (run,) = (folder / "monitoring").glob("demo-monitor-dicom-*")
    return read_document(run / "monitoring.json", MonitoringDocument)


def test_dicom_studies_are_monitored_by_their_study_date(
    small_run: dict, site: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    protocol = _protocol(small_run, site, tmp_path)
    assert main(["check", str(protocol)]) == 0, capsys.readouterr()
    code = main(["monitor", str(protocol), "--no-progress"])
    said = capsys.readouterr()
    assert "DOE" not in said.out + said.err
    document = _document(tmp_path)
    assert document.verdict == "no_alarm"  # the validated studies themselves, under their own temperatures
    assert code == 0
    assert document.excluded["StudyDate is not a date"] == 1
    assert document.excluded["StudyDate is a date in the future"] == 1
    (folder,) = (tmp_path / "monitoring").glob("demo-monitor-dicom-*")
    for name in ("monitoring.json", "monitoring.html", "run.log"):
        assert "DOE" not in without_data_uris((folder / name).read_text(encoding="utf-8"))
    overall = {w.window: w for w in document.windows if (w.attribute, w.group) == OVERALL}
    # the windows and their sizes are the StudyDates' quarters, read here with pydicom, of every study the
    # monitor read: each study once, labelled or not
    read = Counter(
        _quarter(date) for uid, date in site["dates"].items() if uid not in site["spoiled"] and len(date) == 8
    )
    analysed = sum(w.n_studies for w in overall.values())
    assert set(overall) == set(read)
    # the demo's planted junk is left out as a run leaves it out, by unit and reason: pydicom reads the
    # header of its truncated file, which the scan excludes
    assert document.excluded["file: not a DICOM file"] == 2
    assert analysed == sum(read.values()) - document.excluded["file: truncated file"]
    for window, entry in overall.items():
        assert entry.n_labelled <= entry.n_studies <= read[window]
    labelled = sum(w.n_labelled for w in overall.values())
    assert abs(labelled - analysed / 2) <= 0.1 * analysed  # every second label row was kept
    # the scanner groups are the baseline's (its calibration attribute), each with its temperature
    scanners = {w.group for w in document.windows if w.attribute == "scanner"}
    baseline = yaml.safe_load((Path(small_run["folder"]) / "calibration.json").read_text())
    assert scanners and scanners <= set(baseline["groups"])
    assert not any(w.fallback for w in document.windows)
    # a second run reads the logits from the cache and the windows from the history: the same numbers
    assert main(["monitor", str(protocol), "--no-progress"]) == code
    runs = sorted((tmp_path / "monitoring").glob("demo-monitor-dicom-*"))
    again = read_document(runs[-1] / "monitoring.json", MonitoringDocument)
    assert [w.to_dict() for w in again.windows] == [w.to_dict() for w in document.windows]


def test_without_labels_yet_every_study_is_in_the_label_free_part(
    small_run: dict, site: dict, tmp_path: Path
) -> None:
    protocol = _protocol(small_run, site, tmp_path, data__labels=None)
    assert main(["monitor", str(protocol), "--no-progress"]) == 0
    document = _document(tmp_path)
    assert document.windows and all(w.n_labelled == 0 and w.metrics is None for w in document.windows)
    assert sum(w.n_studies for w in document.windows if (w.attribute, w.group) == OVERALL) > 100


def test_a_model_other_than_the_validated_one_is_refused_before_any_study_is_read(
    small_run: dict, site: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from safetensors.numpy import load_file, save_file

    from sitecal.demo import model as demo_model

    weights = load_file(Path(demo_model.__file__).with_name("demo_cnn.safetensors"))
    name = sorted(weights)[0]
    weights[name] = (weights[name] * np.float32(1.01)).astype(weights[name].dtype)
    other = tmp_path / "retrained.safetensors"
    save_file(weights, other)
    protocol = _protocol(small_run, site, tmp_path, model__path=str(other))
    capsys.readouterr()
    assert main(["check", str(protocol)]) == 2
    assert "not the model the baseline validated" in capsys.readouterr().err
    assert main(["monitor", str(protocol), "--no-progress"]) == 2
    assert "not the model the baseline validated" in capsys.readouterr().err
    assert not (tmp_path / "reports").exists()  # nothing scanned, hashed or cached
    # each refused monitor left its folder, unsealed, with the reason in its log and nothing else
    folders = sorted((tmp_path / "monitoring").glob("demo-monitor-dicom-*"))
    assert len(folders) == 1  # check writes nothing
    (folder,) = folders
    assert sorted(p.name for p in folder.iterdir()) == ["INCOMPLETE", "run.log"]
    assert "not the model the baseline validated" in (folder / "run.log").read_text()


@pytest.mark.parametrize(
    ("changes", "field", "reason"),
    [
        (
            {"monitoring__date_column": "study_date"},
            "monitoring.date_column",
            "placed in windows by their StudyDate",
        ),
        ({"data__predictions": "scores.csv"}, "monitoring", "not both joined"),
    ],
)
def test_the_schema_says_how_dicom_studies_are_dated(
    small_run: dict,
    site: dict,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    changes: dict,
    field: str,
    reason: str,
) -> None:
    protocol = _protocol(small_run, site, tmp_path)
    text = yaml.safe_load(protocol.read_text())
    for key, value in changes.items():
        section, _, name = key.partition("__")
        text[section][name] = value
    (tmp_path / "scores.csv").write_text("StudyInstanceUID,logit:normal\n")
    protocol.write_text(yaml.safe_dump(text, sort_keys=False))
    capsys.readouterr()
    assert main(["check", str(protocol)]) == 2
    err = capsys.readouterr().err
    assert field in err and reason in err


def test_a_baseline_of_a_predictions_file_validated_no_model_to_run_here(
    small_run: dict, site: dict, tmp_path: Path
) -> None:
    from sitecal.errors import InputError
    from sitecal.protocol import load_protocol
    from sitecal.run._monitor_dicom import check_model

    loaded = load_protocol(_protocol(small_run, site, tmp_path))
    with pytest.raises(InputError, match="the baseline evaluated a predictions file") as refused:
        check_model(loaded, None, tmp_path / "vendor-run")
    assert "vendor-run/calibration.json" in str(refused.value) and "monitoring.date_column" in str(
        refused.value
    )


def test_no_study_with_a_usable_study_date_exits_2_with_what_was_left_out(
    small_run: dict, site: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only the two spoiled studies: nothing to monitor is bad input, named, never a crash."""
    only = tmp_path / "spoiled"
    for path in sorted(site["dicom"].rglob("*.dcm")):
        try:
            uid = str(pydicom.dcmread(path, stop_before_pixels=True).StudyInstanceUID)
        except Exception:
            continue
        if uid in site["spoiled"]:
            target = only / path.relative_to(site["dicom"])
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    protocol = _protocol(small_run, site, tmp_path, data__dicom_dir=str(only))
    capsys.readouterr()
    assert main(["monitor", str(protocol), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "no study to monitor" in err
    assert "StudyDate is a date in the future: 1" in err and "StudyDate is not a date: 1" in err
    assert "DOE" not in err
