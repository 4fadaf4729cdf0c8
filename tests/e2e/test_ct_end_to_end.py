"""The CT (volume) path end to end through the command line: ``sitecal demo --ct``, from an empty folder.

One small run (50 studies, the CLI's minimum) of the packaged CT demo protocol, as users get it, is checked
against what this module reads from the generated
DICOM files itself with pydicom: which series each study should be analysed on (the protocol's
``data.series`` rules and tie-break applied by hand), which series must be excluded and why, the flow
counts, the logits of a few studies (the volume assembled here and fed to the bundled model), and that no
UID of the inputs reaches the outputs.
"""

from __future__ import annotations

import csv
import hashlib
import hmac
import json
import os
import re
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pydicom
import pytest
import torch
from pypdf import PdfReader
from tests.conftest import CT_DEMO_PROTOCOL, TEST_PSEUDONYM_KEY, VERDICT_EXIT

pytestmark = pytest.mark.slow

N_STUDIES = 50  # the smallest cohort `sitecal demo` accepts
# generate.py writes max(2, round(0.02 * n_studies)) extra studies whose only axial series is too short
N_UNQUALIFIED = max(2, round(0.02 * N_STUDIES))

# The protocol's data.series rules, restated (src/sitecal/demo/protocols/demo-ct.yaml).
MODALITIES = {"CT"}
DESCRIPTION = re.compile(r"(?i)^(thorax|chest)\b")
BODY_PARTS = {"CHEST"}
MIN_SLICES = 12

# Exclusion reasons as the pipeline words them (src/sitecal/cohort/series.py, _build.py).
DESCRIPTION_REASON = "series not selected: SeriesDescription does not match data.series.series_description"
TIE_BREAK_REASON = (
    "another series of the study was chosen (most slices, then lowest SeriesNumber, then lowest "
    "SeriesInstanceUID (compared as numbers, part by part))"
)
NO_SERIES_REASON = "study has no series that meets data.series"


@dataclass(frozen=True)
class Series:
    """One series as read from the files: what the rules look at, and where its files are."""

    study_uid: str
    series_uid: str
    number: int
    modality: str
    description: str
    body_part: str
    files: tuple[Path, ...]  # relative to the DICOM folder

    @property
    def n_slices(self) -> int:
        return len(self.files)

    @property
    def recorded_path(self) -> str:
        """How the run folder names a series: its one file, or the folder holding its files."""
        if len(self.files) == 1:
            return self.files[0].as_posix()
        (folder,) = {f.parent for f in self.files}  # each generated series has a folder of its own
        return folder.as_posix()

    def failed_rule(self) -> str | None:
        """The first of the protocol's rules this series fails (modality, description, body part, size)."""
        if self.modality.strip().upper() not in MODALITIES:
            return f"series not selected: Modality {self.modality} is not one of {sorted(MODALITIES)}"
        if not DESCRIPTION.search(self.description):
            return DESCRIPTION_REASON
        if self.body_part.strip().upper() not in BODY_PARTS:
            return (
                f"series not selected: BodyPartExamined {self.body_part} is not one of {sorted(BODY_PARTS)}"
            )
        if self.n_slices < MIN_SLICES:
            return f"series not selected: {self.n_slices} slices, fewer than min_slices {MIN_SLICES}"
        return None

    def tie_break(self) -> tuple[int, int, tuple[int, ...]]:
        """Most slices, then lowest SeriesNumber, then lowest SeriesInstanceUID compared part by part."""
        return (-self.n_slices, self.number, tuple(int(p) for p in self.series_uid.split(".")))


def _pseudonym(kind: str, value: str) -> str:
    """The documented key (sitecal/_pseudonym.py): HMAC-SHA256(key, kind NUL value), 16 hex digits."""
    prefix = {"patient": "P", "study": "S", "path": "F"}[kind]
    digest = hmac.new(TEST_PSEUDONYM_KEY.encode(), f"{kind}\0{value}".encode(), hashlib.sha256).hexdigest()
    return f"{prefix}-{digest[:16]}"


def _written_path(recorded: str) -> str:
    """How cohort.csv and exclusions.csv write a path: each part the pseudonym of the path up to it."""
    parts = recorded.split("/")
    written = [_pseudonym("path", "/".join(parts[: i + 1])) for i in range(len(parts))]
    if parts[-1].lower().endswith(".dcm"):
        written[-1] += parts[-1][-4:]
    return "/".join(written)


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


@dataclass(frozen=True)
class CtRun:
    """The CLI's run and what this module read from the generated files."""

    done: subprocess.CompletedProcess[str]
    root: Path
    folder: Path  # the run folder
    protocol: Path
    dicom_dir: Path
    n_files: int
    headers: dict[Path, pydicom.FileDataset]  # relative path -> header
    series: dict[str, list[Series]]  # StudyInstanceUID -> its series
    labels: dict[str, str]  # StudyInstanceUID -> label


@pytest.fixture(scope="module")
def ct_run(tmp_path_factory: pytest.TempPathFactory) -> CtRun:
    root = tmp_path_factory.mktemp("ct-e2e")
    # The site secret sitecal would create on first use, fixed so that _pseudonym below can recompute the
    # keys, and the split is the same on every run. Nothing else is in the folder.
    key_file = root / "reports" / ".sitecal-pseudonym-key"
    key_file.parent.mkdir()
    key_file.write_text(TEST_PSEUDONYM_KEY + "\n")
    key_file.chmod(0o600)

    command = [sys.executable, "-m", "sitecal.cli", "demo", "--ct", "--studies", str(N_STUDIES)]
    command += ["--no-progress", "--workers", "2"]
    done = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=600, check=False)
    assert "Traceback" not in done.stderr, done.stderr
    (folder,) = (root / "reports").glob("demo-ct-*")
    protocol_path = root / "sitecal-demo" / "demo-ct.yaml"
    assert protocol_path.read_text() == CT_DEMO_PROTOCOL.read_text()  # the packaged protocol, as it is

    dicom_dir = root / "sitecal-demo" / "ct" / "dicom"
    files = sorted(p for p in dicom_dir.rglob("*") if p.is_file())
    headers = {p.relative_to(dicom_dir): pydicom.dcmread(p, stop_before_pixels=True) for p in files}
    members: dict[tuple[str, str], list[Path]] = defaultdict(list)
    for relative, ds in headers.items():
        members[(str(ds.StudyInstanceUID), str(ds.SeriesInstanceUID))].append(relative)
    series_by_study: dict[str, list[Series]] = defaultdict(list)
    for (study_uid, series_uid), paths in sorted(members.items()):
        ds = headers[paths[0]]
        series_by_study[study_uid].append(
            Series(
                study_uid=study_uid,
                series_uid=series_uid,
                number=int(ds.SeriesNumber),
                modality=str(ds.get("Modality", "")),
                description=str(ds.get("SeriesDescription", "")),
                body_part=str(ds.get("BodyPartExamined", "")),
                files=tuple(paths),
            )
        )
    labels = {r["StudyInstanceUID"]: r["label"] for r in _read_csv(dicom_dir.parent / "labels.csv")}
    return CtRun(
        done=done,
        root=root,
        folder=folder,
        protocol=protocol_path,
        dicom_dir=dicom_dir,
        n_files=len(files),
        headers=headers,
        series=dict(series_by_study),
        labels=labels,
    )


def _expected_choice(series: list[Series]) -> tuple[Series | None, list[tuple[Series, str]]]:
    """The chosen series of a study and the reason each other one is set aside, by the rules above."""
    qualifying = sorted((s for s in series if s.failed_rule() is None), key=Series.tie_break)
    passed_over = [(s, reason) for s in series if (reason := s.failed_rule()) is not None]
    passed_over += [(s, TIE_BREAK_REASON) for s in qualifying[1:]]
    return (qualifying[0] if qualifying else None), passed_over


def test_cli_demo_runs_to_a_verdict_and_writes_every_artifact(ct_run: CtRun) -> None:
    done, folder = ct_run.done, ct_run.folder
    evaluation = json.loads((folder / "evaluation.json").read_text())
    assert done.returncode == VERDICT_EXIT[evaluation["verdict"]], done.stderr
    assert f"Verdict: {evaluation['verdict'].upper()}" in done.stdout
    assert f"Report:  {folder / 'report.pdf'}" in done.stdout
    for name in ("cohort.csv", "exclusions.csv", "predictions.csv", "calibration.json", "provenance.json"):
        assert (folder / name).is_file(), name


def test_the_protocols_compared_methods_reach_the_document_and_the_report(ct_run: CtRun) -> None:
    evaluation = json.loads((ct_run.folder / "evaluation.json").read_text())
    compared = evaluation["method_comparison"]
    methods = ["temperature", "vector", "matrix", "dirichlet", "histogram", "isotonic", "beta"]
    assert compared["methods"] == methods
    scanners = sorted(g["group"] for g in evaluation["subgroups"]["scanner"])
    assert [g["group"] for g in compared["groups"]] == ["All studies", *scanners]
    for group in compared["groups"]:
        assert group["n_evaluation"] == sum(
            g["n"]
            for g in evaluation["subgroups"]["scanner"]
            if group["group"] in (g["group"], "All studies")
        )
    text = re.sub(r"\s+", " ", _pdf_text(ct_run.folder / "report.pdf"))
    assert "Recalibration methods compared" in text
    assert "Beta calibration" in text and "Δ: the method minus temperature scaling" in text


def test_the_cohort_exercises_every_selection_rule(ct_run: CtRun) -> None:
    # Without these situations the selection checks below would prove little.
    assert not any("NumberOfFrames" in ds for ds in ct_run.headers.values())  # one slice per file
    seen: Counter[str] = Counter()
    for series in ct_run.series.values():
        qualifying = [s for s in series if s.failed_rule() is None]
        if not qualifying:
            seen["no qualifying series"] += 1
        if len(qualifying) == 2:
            a, b = qualifying
            if a.n_slices != b.n_slices:
                seen["slices decide"] += 1
            elif a.number != b.number:
                seen["SeriesNumber decides"] += 1
            else:
                seen["SeriesInstanceUID decides"] += 1
        reasons = [s.failed_rule() or "" for s in series]
        seen["too short"] += sum(r.endswith(f"min_slices {MIN_SLICES}") for r in reasons)
        seen["description fails"] += sum(r == DESCRIPTION_REASON for r in reasons)
    assert len(ct_run.series) == N_STUDIES + N_UNQUALIFIED
    assert seen["no qualifying series"] == N_UNQUALIFIED
    for situation in ("slices decide", "SeriesNumber decides", "SeriesInstanceUID decides", "too short"):
        assert seen[situation] >= 1, situation
    assert seen["description fails"] == len(ct_run.series)  # every study has a localizer


def test_each_study_is_analysed_on_the_series_the_rules_choose(ct_run: CtRun) -> None:
    cohort = {r["study_key"]: r for r in _read_csv(ct_run.folder / "cohort.csv")}
    expected = {}
    for study_uid, series in ct_run.series.items():
        chosen, _ = _expected_choice(series)
        if chosen is not None:
            expected[_pseudonym("study", study_uid)] = (study_uid, chosen)
    assert set(cohort) == set(expected)
    shown = Counter(
        (field, str(ct_run.headers[chosen.files[0]].get(field, "")))
        for _, chosen in expected.values()
        for field in ("ManufacturerModelName", "InstitutionName", "PatientSex")
    )
    for key, (study_uid, chosen) in expected.items():
        row = cohort[key]
        # cohort.csv names the chosen series by the folder of its files, the only place it is recorded
        assert row["file"] == _written_path(chosen.recorded_path), (key, row["file"], chosen.recorded_path)
        ds = ct_run.headers[chosen.files[0]]
        assert row["patient_key"] == _pseudonym("patient", str(ds.PatientID))
        assert row["label"] == ct_run.labels[study_uid]
        # values of fewer than privacy.min_count_shown (5) analysed studies are shown pooled
        assert (row["scanner"], row["site"], row["sex"]) == tuple(
            value if shown[(field, value)] >= 5 else "other (n < 5)"
            for field, value in (
                ("ManufacturerModelName", ds.ManufacturerModelName),
                ("InstitutionName", ds.InstitutionName),
                ("PatientSex", ds.PatientSex),
            )
        )


def test_every_series_not_analysed_is_excluded_with_its_reason(ct_run: CtRun) -> None:
    expected: Counter[tuple[str, str, str, str]] = Counter()
    for study_uid, series in ct_run.series.items():
        key = _pseudonym("study", study_uid)
        chosen, passed_over = _expected_choice(series)
        assert len(passed_over) == len(series) - (chosen is not None)
        for s, reason in passed_over:
            expected[("series", reason, _written_path(s.recorded_path), key)] += 1
        if chosen is None:
            expected[("series", NO_SERIES_REASON, "", key)] += 1
    rows = _read_csv(ct_run.folder / "exclusions.csv")
    found = Counter((r["stage"], r["reason"], r["file"], r["key"]) for r in rows)
    assert found == expected, (found - expected, expected - found)


def test_cohort_flow_counts_match_the_files(ct_run: CtRun) -> None:
    evaluation = json.loads((ct_run.folder / "evaluation.json").read_text())
    flow = evaluation["cohort_flow"]
    reasons: Counter[tuple[str, str]] = Counter()
    analysed = 0
    for series in ct_run.series.values():
        chosen, passed_over = _expected_choice(series)
        reasons.update(("series", reason) for _, reason in passed_over)
        if chosen is None:
            reasons[("series", NO_SERIES_REASON)] += 1
        else:
            analysed += 1
    n_files = sum(len(names) for _, _, names in os.walk(ct_run.dicom_dir))
    assert flow["files_found"] == n_files == ct_run.n_files
    assert flow["dicom_instances"] == len(ct_run.headers)
    assert flow["studies"] == len(ct_run.series) == len(ct_run.labels)
    assert flow["labelled"] == flow["analysed"] == analysed == N_STUDIES
    assert flow["fit"] + flow["evaluation"] == analysed
    splits = Counter(r["split"] for r in _read_csv(ct_run.folder / "cohort.csv"))
    assert splits == {"fit": flow["fit"], "evaluation": flow["evaluation"]}
    assert {(e["stage"], e["reason"]): e["count"] for e in flow["exclusions"]} == dict(reasons)


def _hu_volume(datasets: Sequence[pydicom.Dataset], order: np.ndarray) -> np.ndarray:
    """Stored values times RescaleSlope plus RescaleIntercept (float64), stacked in ``order``, as float32."""
    return np.stack(
        [
            datasets[i].pixel_array.astype(np.float64) * float(datasets[i].RescaleSlope)
            + float(datasets[i].RescaleIntercept)
            for i in order
        ]
    ).astype(np.float32)


def test_logits_are_the_bundled_model_on_volumes_assembled_here(ct_run: CtRun) -> None:
    from sitecal.inference import build_transforms, load_model
    from sitecal.protocol import load_protocol

    loaded = load_protocol(ct_run.protocol)
    model = load_model(loaded.protocol.model, loaded.model_path).module
    transforms = build_transforms(loaded.protocol.inputs.transforms, load=False)  # the array chain only
    predictions = {r["study_key"]: r for r in _read_csv(ct_run.folder / "predictions.csv")}

    # Two studies per scanner: the one whose InstanceNumbers run backwards and the tilted gantry included.
    picked: dict[str, list[tuple[str, Series]]] = defaultdict(list)
    for study_uid, series in sorted(ct_run.series.items()):
        chosen, _ = _expected_choice(series)
        if chosen is not None:
            scanner = str(ct_run.headers[chosen.files[0]].ManufacturerModelName)
            if len(picked[scanner]) < 2:
                picked[scanner].append((study_uid, chosen))
    assert len(picked) == 3
    wrong_order_moved = 0.0
    for study_uid, chosen in [p for pairs in picked.values() for p in pairs]:
        datasets = [pydicom.dcmread(ct_run.dicom_dir / f) for f in chosen.files]
        cosines = np.array([float(v) for v in datasets[0].ImageOrientationPatient])
        normal = np.cross(cosines[:3], cosines[3:])
        depth = np.array([np.dot([float(v) for v in ds.ImagePositionPatient], normal) for ds in datasets])

        def logits(order: np.ndarray, datasets: list[pydicom.FileDataset] = datasets) -> np.ndarray:
            with torch.inference_mode():
                x = transforms(_hu_volume(datasets, order))
                out: np.ndarray = model(torch.as_tensor(x, dtype=torch.float32)[None]).numpy()[0]
                return out

        row = predictions[_pseudonym("study", study_uid)]
        written = np.array([float(row["logit:no_nodule"]), float(row["logit:nodule"])])
        # float32 throughout; the run infers in batches of 16, this check one volume at a time, so the
        # convolutions sum in another order: measured differences are about 1.5e-6 on logits up to 8, i.e.
        # ~10 float32 ulps. 1e-4 leaves ~100x room for other CPU kernels; a wrong slice order moves the
        # logits by 0.5 or more (asserted below), so the tolerance cannot hide one.
        np.testing.assert_allclose(written, logits(np.argsort(depth, kind="stable")), rtol=1e-4, atol=1e-4)
        by_number = np.argsort([int(ds.InstanceNumber) for ds in datasets], kind="stable")
        descending = np.argsort(-depth, kind="stable")
        for wrong in (by_number, descending):
            wrong_order_moved = max(wrong_order_moved, float(np.abs(logits(wrong) - written).max()))
    assert wrong_order_moved > 0.1  # the check can tell slice orders apart


def _pdf_text(path: Path) -> str:
    return "\n".join(page.extract_text() or "" for page in PdfReader(path).pages)


def test_report_exists_and_no_uid_of_the_inputs_is_in_any_output(ct_run: CtRun) -> None:
    folder = ct_run.folder
    pdf = folder / "report.pdf"
    assert pdf.read_bytes().startswith(b"%PDF-")
    text = _pdf_text(pdf)
    assert "Calibration validation of the demo chest CT nodule triage model" in re.sub(r"\s+", " ", text)
    report = pydicom.dcmread(folder / "report.dcm")
    assert report.SOPClassUID == "1.2.840.10008.5.1.4.1.1.104.1"  # Encapsulated PDF Storage
    assert report.EncapsulatedDocument[: report.EncapsulatedDocumentLength] == pdf.read_bytes()

    uids: set[str] = set()
    others: set[str] = set()
    for ds in ct_run.headers.values():
        uids.update(str(ds.get(k)) for k in ("StudyInstanceUID", "SeriesInstanceUID", "SOPInstanceUID"))
        uids.add(str(ds.file_meta.MediaStorageSOPInstanceUID))
        if "FrameOfReferenceUID" in ds:
            uids.add(str(ds.FrameOfReferenceUID))
        others.update(str(ds.get(k)) for k in ("PatientID", "PatientName", "AccessionNumber"))
    assert len(uids) > len(ct_run.headers)  # one SOP UID per file, and the study and series UIDs
    others = {v for v in others if len(v) >= 6}

    # every file the run wrote (run folder and the logit cache beside it), as bytes, plus the PDF's text
    texts = {
        str(p.relative_to(ct_run.root)): p.read_bytes().decode("latin-1")
        for p in (ct_run.root / "reports").rglob("*")
        if p.is_file()
    }
    texts["report.pdf (text)"] = text
    assert {"cohort.csv", "exclusions.csv", "predictions.csv", "run.log", "report.dcm"} <= {
        Path(name).name for name in texts
    }
    for name, content in texts.items():
        # a UID in clear is a run of digits and dots; gather those runs, then look for each UID in them
        runs = " ".join(set(re.findall(r"[0-9.]{10,}", content)))
        leaked = [u for u in uids if u in runs] + [v for v in others if v in content]
        assert not leaked, f"{name} contains identifiers of the inputs in clear: {len(leaked)}"
