"""A network's sites predict behind their firewalls; their parts evaluated together equal a central run.

One generated cohort is split by InstitutionName into two "sites" (each with its own DICOM folder and
labels). Each site runs ``sitecal predict`` under the network key; the central run predicts every study in
one place under the same key. ``sitecal evaluate`` over the two sites' parts and over the central part give
the same ``evaluation.json``, ``calibration.json`` and ``cohort.csv``, byte for byte. The model runs with
``inputs.batch_size: 1`` here: a float32 network's output can move in its last bits with the batch a study
is computed in, and the sites' batches cannot be the central run's.
"""

from __future__ import annotations

import csv
import difflib
import json
import shutil
import subprocess
from pathlib import Path

import pydicom
import pytest
import yaml
from tests.conftest import VERDICT_EXIT, write_demo_protocol

from sitecal._pseudonym import create_network_key
from sitecal.cli import main
from sitecal.demo import generate_demo

EPOCH = "1767225600"
COMPARED = ("evaluation.json", "calibration.json", "cohort.csv", "report-context.json")


@pytest.fixture(scope="module")
def network(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("network")
    manifest = generate_demo(root / "data", n_studies=100, seed=11)
    template = write_demo_protocol(
        root,
        manifest,
        inputs={"num_workers": 0, "batch_size": 1},
        evaluation={"bootstrap": {"n_resamples": 50, "seed": 7, "refit": False}},
    )
    protocol = yaml.safe_load(template.read_text())
    key = root / "network.key"
    create_network_key(key)
    protocol["privacy"] = {"network_key_file": str(key)}
    headers = _headers(manifest.dicom_dir)
    sites = sorted({site for site, _ in headers.values()})
    assert len(sites) >= 2
    site_a = set(sites[: len(sites) // 2])
    with manifest.labels_csv.open(encoding="utf-8") as fh:
        labels = list(csv.DictReader(fh))
    uids_a = {uid for site, uid in headers.values() if site in site_a}
    mp = pytest.MonkeyPatch()
    mp.setenv("SOURCE_DATE_EPOCH", EPOCH)
    mp.chdir(root)
    paths: dict[str, Path] = {}
    try:
        for name, mine in (("a", True), ("b", False)):
            folder = root / f"site-{name}"
            for path, (site, _) in headers.items():
                if (site in site_a) == mine:  # the unreadable files go to site b
                    target = folder / "dicom" / path.relative_to(manifest.dicom_dir)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(path, target)
            rows = [r for r in labels if (r["StudyInstanceUID"] in uids_a) == mine]
            _write_labels(folder / "labels.csv", rows)
            paths[name] = _protocol(
                root / f"site-{name}.yaml",
                protocol,
                dicom_dir=folder / "dicom",
                labels=folder / "labels.csv",
                output=folder / "reports",
            )
        paths["central"] = _protocol(
            root / "central.yaml",
            protocol,
            dicom_dir=manifest.dicom_dir,
            labels=manifest.labels_csv,
            output=root / "central-reports",
        )
        for name in ("a", "b"):
            args = ["predict", str(paths[name]), "--output", str(root / "parts" / f"site-{name}.csv")]
            assert main([*args, "--no-progress"]) == 0
        args = ["predict", str(paths["central"]), "--output", str(root / "central-part" / "all.csv")]
        assert main([*args, "--no-progress"]) == 0
        together = _evaluate(paths["central"], root / "parts", root / "central-reports")
        central = _evaluate(paths["central"], root / "central-part", root / "central-reports")
    finally:
        mp.undo()
    return {"root": root, "paths": paths, "together": together, "central": central, "headers": headers}


def test_two_sites_parts_evaluate_as_one_central_run(network: dict) -> None:
    together, central = network["together"], network["central"]
    assert together != central
    for name in COMPARED:
        a, b = (together / name).read_text(), (central / name).read_text()
        assert a == b, name + "\n" + "\n".join(difflib.unified_diff(a.splitlines(), b.splitlines(), n=4))
    evaluation = json.loads((together / "evaluation.json").read_text())
    sites = {g["group"] for g in evaluation["subgroups"]["site"]}
    assert len(sites) >= 2  # per-site results, from both sites' parts
    provenance = json.loads((together / "provenance.json").read_text())
    assert sorted(provenance["sha256"]["predictions_parts"]) == ["site-a.csv", "site-b.csv"]
    assert provenance["network_parts"]["parts"] == 2 and "predictions_file" not in provenance
    assert evaluation["cohort_flow"]["source"] == "network_parts"
    text = " ".join(_pdf_text(together / "report.pdf").split())
    assert "come from the predictions parts of 2 sites of a network" in text
    assert "Predictions part site-b.csv" in text and "read from a predictions file" not in text


def test_a_part_carries_no_identifier(network: dict) -> None:
    parts = network["root"] / "parts"
    text = "".join(p.read_text(encoding="utf-8") for p in sorted(parts.iterdir()))
    for path, (site, uid) in network["headers"].items():
        assert path.name not in text
        if site == "~unreadable":
            continue
        ds = pydicom.dcmread(path, stop_before_pixels=True)
        for value in (uid, str(ds.PatientID), str(ds.PatientName), str(ds.SOPInstanceUID)):
            assert value not in text
    with (parts / "site-a.csv").open(encoding="utf-8") as fh:
        header = next(csv.reader(fh))
    assert header[:3] == ["study_key", "patient_key", "label"]
    assert [c for c in header if c.startswith("subgroup:")] == [
        "subgroup:scanner",
        "subgroup:site",
        "subgroup:sex",
        "subgroup:age_band",
    ]  # the intersection sex_age is formed centrally


def test_check_accepts_the_parts_and_refuses_a_tampered_or_foreign_one(
    network: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    central = network["paths"]["central"]
    parts = network["root"] / "parts"
    assert main(["check", str(central), "--predictions", str(parts)]) == 0
    capsys.readouterr()

    tampered = _copy(parts, tmp_path / "tampered")
    lines = (tampered / "site-a.csv").read_text().splitlines(keepends=True)
    (tampered / "site-a.csv").write_text("".join(lines[:-1]))
    assert main(["check", str(central), "--predictions", str(tampered)]) == 2
    assert "its sha256 is not the one its sidecar recorded" in capsys.readouterr().err

    twice = _copy(parts, tmp_path / "twice")
    shutil.copy(twice / "site-a.csv", twice / "site-a-again.csv")
    shutil.copy(twice / "site-a.csv.part.json", twice / "site-a-again.csv.part.json")
    sidecar = json.loads((twice / "site-a-again.csv.part.json").read_text())
    sidecar["csv"] = "site-a-again.csv"
    (twice / "site-a-again.csv.part.json").write_text(json.dumps(sidecar))
    assert main(["evaluate", str(central), "--predictions", str(twice), "--no-progress"]) == 2
    assert "must be in one part only" in capsys.readouterr().err

    foreign = _copy(parts, tmp_path / "foreign")
    sidecar = json.loads((foreign / "site-b.csv.part.json").read_text())
    sidecar["network_key_fingerprint"] = "0" * 16
    (foreign / "site-b.csv.part.json").write_text(json.dumps(sidecar))
    assert main(["check", str(central), "--predictions", str(foreign)]) == 2
    assert "another network key" in capsys.readouterr().err

    alone = _copy(parts, tmp_path / "alone")
    (alone / "site-a.csv").unlink()
    assert main(["check", str(central), "--predictions", str(alone)]) == 2
    assert "site-a.csv.part.json: the part it describes, site-a.csv, is missing" in capsys.readouterr().err
    # without the network key, a folder of parts cannot be read
    site_protocol = yaml.safe_load(central.read_text())
    site_protocol["privacy"] = {}
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump(site_protocol, sort_keys=False))
    assert main(["check", str(plain), "--predictions", str(parts)]) == 2
    assert "privacy.network_key_file" in capsys.readouterr().err


def test_a_missing_network_key_is_never_created(network: dict, tmp_path: Path, capsys) -> None:
    protocol = yaml.safe_load(network["paths"]["a"].read_text())
    protocol["privacy"] = {"network_key_file": str(tmp_path / "missing.key")}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(protocol, sort_keys=False))
    assert main(["check", str(path)]) == 2
    assert "sitecal network-key" in capsys.readouterr().err
    assert not (tmp_path / "missing.key").exists()
    assert main(["network-key", str(network["root"] / "network.key")]) == 2  # never overwritten


def _pdf_text(path: Path) -> str:
    return subprocess.run(
        ["pdftotext", "-layout", str(path), "-"], capture_output=True, text=True, check=True
    ).stdout


def _headers(dicom_dir: Path) -> dict[Path, tuple[str, str]]:
    """Each file's (InstitutionName, StudyInstanceUID); a file that is no DICOM goes with site b."""
    out = {}
    for path in sorted(dicom_dir.rglob("*")):
        if path.is_file():
            try:
                ds = pydicom.dcmread(path, stop_before_pixels=True)
                out[path] = (str(ds.InstitutionName), str(ds.StudyInstanceUID))
            except Exception:
                out[path] = ("~unreadable", "")
    return out


def _write_labels(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _protocol(path: Path, template: dict, *, dicom_dir: Path, labels: Path, output: Path) -> Path:
    protocol = json.loads(json.dumps(template))
    protocol["data"]["dicom_dir"] = str(dicom_dir)
    protocol["data"]["labels"] = str(labels)
    protocol["report"]["output_dir"] = str(output)
    path.write_text(yaml.safe_dump(protocol, sort_keys=False))
    return path


def _evaluate(protocol: Path, parts: Path, reports: Path) -> Path:
    before = set(reports.glob("*")) if reports.exists() else set()
    code = main(["evaluate", str(protocol), "--predictions", str(parts), "--no-progress"])
    (folder,) = set(reports.glob("*")) - before - {p for p in reports.glob(".*")}
    assert code == VERDICT_EXIT[json.loads((folder / "evaluation.json").read_text())["verdict"]]
    return folder


def _copy(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target
