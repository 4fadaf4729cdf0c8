"""A network's sites predict behind their firewalls; their parts evaluated together equal a central run.

One generated cohort is split by InstitutionName into two "sites" (each with its own DICOM folder and
labels). Each site runs ``sitecal predict`` under the network key; the central run predicts every study in
one place under the same key. ``sitecal evaluate`` over the two sites' parts and over the central part give
the same ``evaluation.json``, ``calibration.json`` and ``cohort.csv``, byte for byte. The model runs with
``inputs.batch_size: 1`` here: a float32 network's output can move in its last bits with the batch a study
is computed in, and the sites' batches cannot be the central run's.
"""

from __future__ import annotations

import ast
import csv
import difflib
import hashlib
import json
import shutil
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import get_args

import pydicom
import pytest
import yaml
from tests.conftest import VERDICT_EXIT, without_data_uris, write_demo_protocol

from sitecal._pseudonym import Pseudonymizer, create_network_key, load_network_key
from sitecal.cli import main
from sitecal.cohort._exclusion_codes import CODE_PATTERN, NON_FINITE_LOGITS, REASONS, STAGES, reason_code
from sitecal.cohort._part_sidecar import Sidecar, part_mac
from sitecal.cohort._parts import part_facts, read_parts
from sitecal.cohort._records import Exclusion
from sitecal.demo import generate_demo
from sitecal.protocol import load_protocol
from sitecal.results._kinds import ExclusionStage

EPOCH = "1767225600"
NAME, MRN = "DOE^JANE", "MRN12345678"
#: Reasons whose text holds a name and an MRN (a DICOM value, a library's message, a reason no family
#: of the vocabulary names): each leaves the site as a code only.
PLANTED = (
    Exclusion(stage="scan", reason=f"corrupt DICOM header ({NAME} {MRN})", unit="file"),
    Exclusion(
        stage="series",
        reason=f"series not selected: BodyPartExamined {NAME} is not one of ['CHEST']",
        unit="series",
    ),
    Exclusion(stage="scan", reason=f"{NAME} {MRN}", unit="file"),
)
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
    # the copy renamed and sealed again under the network key: only a holder of the key can do this
    _reseal(network, twice / "site-a-again.csv.part.json", lambda d: d.update(csv="site-a-again.csv"))
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


def test_a_sites_sidecar_carries_reason_codes_never_text(network: dict) -> None:
    parts = network["root"] / "parts"
    rows = [row for p in sorted(parts.glob("*.part.json")) for row in json.loads(p.read_text())["exclusions"]]
    assert rows and all(set(row) == {"code", "unit", "count"} for row in rows)
    assert all(CODE_PATTERN.fullmatch(row["code"]) for row in rows)
    # site b holds the demo's unreadable files: their scan reasons travel as codes
    assert any(row["code"].startswith("scan/") and row["code"] != "scan/other" for row in rows), rows


def test_an_edited_byte_of_a_part_or_of_its_sidecar_is_refused_naming_the_file(
    network: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    central = network["paths"]["central"]
    edited = _copy(network["root"] / "parts", tmp_path / "edited")
    part = edited / "site-a.csv"
    data = bytearray(part.read_bytes())
    digit = data.index(b".", data.index(b"\n")) + 1  # a logit's first decimal, on the first row
    data[digit] = ord("0") if data[digit] != ord("0") else ord("1")
    part.write_bytes(bytes(data))
    assert main(["check", str(central), "--predictions", str(edited)]) == 2
    assert f"{part}: its sha256 is not the one its sidecar recorded" in capsys.readouterr().err

    edited = _copy(network["root"] / "parts", tmp_path / "edited-sidecar")
    sidecar = edited / "site-b.csv.part.json"
    text = sidecar.read_text()
    files_found = json.loads(text)["flow"]["files_found"]
    sidecar.write_text(text.replace(f'"files_found": {files_found}', f'"files_found": {files_found + 1}'))
    assert main(["check", str(central), "--predictions", str(edited)]) == 2
    assert (
        f"{sidecar}: its seal (mac) does not match its content under the network key"
        in capsys.readouterr().err
    )


def test_a_recomputed_plain_sha256_is_no_longer_enough(
    network: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Who changes a part and records its new sha256 in the sidecar, without the network key, is found out."""
    central = network["paths"]["central"]
    forged = _copy(network["root"] / "parts", tmp_path / "forged")
    part = forged / "site-a.csv"
    lines = part.read_text().splitlines(keepends=True)
    label = lines[1].split(",")[2]
    other = next(c for c in ("normal", "nodule", "effusion") if c != label)
    lines[1] = lines[1].replace(f",{label},", f",{other},", 1)  # a label flipped
    part.write_text("".join(lines))
    sidecar = forged / "site-a.csv.part.json"
    document = json.loads(sidecar.read_text())
    document["csv_sha256"] = hashlib.sha256(part.read_bytes()).hexdigest()
    sidecar.write_text(json.dumps(document, indent=2))
    assert main(["check", str(central), "--predictions", str(forged)]) == 2
    err = capsys.readouterr().err
    assert f"{sidecar}: its seal (mac) does not match its content under the network key" in err
    assert "(site-a.csv) with the sha256 recorded here" in err


def test_planted_reasons_reach_no_output_and_show_as_sitecals_sentences(
    network: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A name and an MRN in reasons at a site leave it as codes; centrally, sitecal's sentences only."""
    planted = _copy(network["root"] / "parts", tmp_path / "planted")
    shipped = Sidecar.counted(PLANTED)
    assert [e.code for e in shipped] == ["scan/corrupt-header", "series/body-part", "scan/other"]

    def add(document: dict) -> None:
        document["exclusions"] += [{"code": e.code, "unit": e.unit, "count": e.count} for e in shipped]
        document["flow"]["files_found"] += 2

    _reseal(network, planted / "site-a.csv.part.json", add)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    capsys.readouterr()
    folder = _evaluate(network["paths"]["central"], planted, network["root"] / "central-reports")
    captured = capsys.readouterr()
    texts = {
        "stdout": captured.out,
        "stderr": captured.err,
        "report.pdf (text)": _pdf_text(folder / "report.pdf"),
    }
    texts |= {p.name: p.read_bytes().decode("utf-8", "replace") for p in folder.rglob("*") if p.is_file()}
    texts["report.html"] = without_data_uris(texts["report.html"])  # figures are base64, no text
    for name, text in texts.items():
        # parts of them too, in every text (compressed streams of a PDF may hold 3 letters by chance)
        binary = name.endswith((".pdf", ".dcm", ".png"))
        for secret in (NAME, MRN) if binary else (NAME, MRN, "DOE", "12345678"):
            assert secret not in text, (name, secret)
    evaluation = json.loads((folder / "evaluation.json").read_text())
    reasons = {row["reason"] for row in evaluation["cohort_flow"]["exclusions"]}
    assert {
        "corrupt DICOM header",
        "series not selected: BodyPartExamined is not one of data.series.body_part",
        "file not read for another reason (the detail stays at the site)",
    } <= reasons


def test_a_planted_reason_code_is_refused_without_echoing_it(
    network: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    planted = _copy(network["root"] / "parts", tmp_path / "planted-code")
    sidecar = planted / "site-b.csv.part.json"
    n = len(json.loads(sidecar.read_text())["exclusions"])
    row = {"code": f"{NAME} {MRN}", "unit": "file", "count": 1}
    _reseal(network, sidecar, lambda d: d["exclusions"].append(row))
    assert main(["check", str(network["paths"]["central"]), "--predictions", str(planted)]) == 2
    err = capsys.readouterr().err
    assert (
        f"{sidecar}: exclusions[{n}]: its reason code is not one of this sitecal's (the code is not shown)"
        in err
    )
    assert NAME not in err and MRN not in err


def test_a_sealed_part_reads_back_as_the_cohort_it_was_written_from(tmp_path: Path) -> None:
    from tests.security.test_hostile_parts import write_synthetic_part

    manifest = type("M", (), {"dicom_dir": tmp_path / "dicom", "labels_csv": tmp_path / "labels.csv"})
    protocol = yaml.safe_load(write_demo_protocol(tmp_path, manifest).read_text())
    create_network_key(tmp_path / "network.key")
    protocol["privacy"] = {"network_key_file": str(tmp_path / "network.key")}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(protocol, sort_keys=False))
    loaded = load_protocol(tmp_path / "p.yaml")
    pseudonymize = Pseudonymizer(loaded.pseudonym_key())
    exclusions = (
        *[Exclusion(stage="scan", reason="not a DICOM file", unit="file")] * 3,
        Exclusion(stage="labels", reason="study has no label", unit="study"),
        Exclusion(stage="inference", reason=NON_FINITE_LOGITS, unit="study"),
        *PLANTED,
    )
    (tmp_path / "parts").mkdir()
    sidecar = write_synthetic_part(
        tmp_path / "parts" / "a.csv", loaded, pseudonymize, site="a", seed=3, exclusions=exclusions
    )
    assert NAME not in sidecar.read_text() and MRN not in sidecar.read_text()
    read = read_parts(
        tmp_path / "parts",
        facts=part_facts(loaded.protocol, pseudonymize.fingerprint, model_sha256=None),
        subgroups=loaded.protocol.subgroups,
        min_count_shown=loaded.protocol.privacy.min_count_shown,
        pseudonymize=pseudonymize,
    )
    with (tmp_path / "parts" / "a.csv").open(encoding="utf-8") as fh:
        written = list(csv.DictReader(fh))
    assert [s.study_key for s in read.studies] == [row["study_key"] for row in written]
    assert [s.patient_key for s in read.studies] == [row["patient_key"] for row in written]
    names = ("normal", "nodule", "effusion")
    assert [names[s.label] for s in read.studies] == [row["label"] for row in written]
    for study, row in zip(read.studies, written, strict=True):
        assert study.logits is not None
        assert study.logits.tolist() == [float(row[f"logit:{c}"]) for c in names]
        assert {k: study.attributes[k] for k in ("scanner", "site", "sex", "age_band")} == {
            k: row[f"subgroup:{k}"] for k in ("scanner", "site", "sex", "age_band")
        }
    assert (read.files_found, read.dicom_instances, read.n_studies_found, read.n_labelled) == (68, 60, 60, 60)
    counts = Counter((e.stage, e.reason, e.unit) for e in read.exclusions)
    assert counts == {
        # sitecal's fixed sentences read back as written
        ("scan", "not a DICOM file", "file"): 3,
        ("labels", "study has no label", "study"): 1,
        ("inference", NON_FINITE_LOGITS, "study"): 1,
        # sentences holding input text read back as the family's sentence
        ("scan", "corrupt DICOM header", "file"): 1,
        ("series", "series not selected: BodyPartExamined is not one of data.series.body_part", "series"): 1,
        ("scan", "file not read for another reason (the detail stays at the site)", "file"): 1,
    }


def test_the_vocabulary_is_closed_and_covers_sitecals_reasons() -> None:
    codes = [e.code for e in REASONS]
    assert len(codes) == len(set(codes)) and all(CODE_PATTERN.fullmatch(c) for c in codes)
    assert all(f"{stage}/other" in codes for stage in STAGES)
    with pytest.raises(ValueError, match="exclusion stage 'elsewhere' is none of retrieve, scan"):
        reason_code("elsewhere", "anything")
    from sitecal.inference._forward import NON_FINITE_LOGITS as written

    assert written == NON_FINITE_LOGITS
    assert STAGES == get_args(ExclusionStage)  # the flow's schema names the same stages
    # every stage sitecal writes an exclusion at is one of the vocabulary's
    source = Path(__file__).parents[2] / "src" / "sitecal"
    stages = {
        kw.value.value
        for path in source.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Exclusion"
        for kw in node.keywords
        if kw.arg == "stage" and isinstance(kw.value, ast.Constant)
    }
    assert stages and stages <= set(STAGES), stages - set(STAGES)
    from sitecal.cohort._walk import unreadable_folder_reason

    reasons = {
        "retrieve/not-retrieved": ("retrieve", "not retrieved from the PACS: association rejected"),
        "scan/unreadable-folder": (
            "scan",
            unreadable_folder_reason(PermissionError(13, "Permission denied")),
        ),
        "scan/read-timeout": ("scan", "header read timed out after 30 s"),
        "scan/missing-SOPInstanceUID": ("scan", "missing required tag SOPInstanceUID"),
        "scan/implausible-Rows": ("scan", "implausible value in tag Rows (0)"),
        "scan/not-integer-BitsStored": ("scan", "malformed value in tag BitsStored (not an integer)"),
        "scan/too-large": ("scan", "image too large: declares 70000 x 70000 = 4900000000 pixel values, ..."),
        "series/modality": ("series", "series not selected: Modality MR is not one of ['CT']"),
        "series/min-slices": ("series", "series not selected: 1 slice, fewer than min_slices 20"),
        "labels/no-join-key": ("labels", "study has no AccessionNumber to join labels"),
        "labels/unknown-label": (
            "labels",
            "unusable label row: label is not one of the class names [a, b] or...",
        ),
        "inference/model-failed": ("inference", "the model failed on this study (RuntimeError: shapes)"),
        "inference/transforms-cannot-take": (
            "inference",
            "a colour image that the transforms cannot take: Resize: x",
        ),
        "inference/not-one-volume": (
            "inference",
            "PixelSpacing (0028,0030) differs between slices: the series ...",
        ),
    }
    for code, (stage, reason) in reasons.items():
        assert reason_code(stage, reason) == code, (code, reason)
    for entry in REASONS:  # no entry is hidden by one before it: each sentence its pattern takes maps to it
        if entry.pattern.match(entry.sentence):
            assert reason_code(entry.stage, entry.sentence) == entry.code, entry.code


def _reseal(network: dict, sidecar: Path, edit: Callable[[dict], None]) -> None:
    """Edit a sidecar and seal it again under the network key (what only a key holder can do)."""
    document = json.loads(sidecar.read_text())
    edit(document)
    document["mac"] = part_mac(load_network_key(network["root"] / "network.key"), document)
    sidecar.write_text(json.dumps(document))


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
