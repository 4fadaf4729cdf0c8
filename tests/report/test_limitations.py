"""Cohort characteristics and Limitations sections, built from an evaluation run in the test.

The evaluation runs on synthetic arrays whose scanner groups include a hostile name (markup, quotes,
ampersand, non-Latin-1 letters) and ``unknown`` values; the two sections are rendered into a small PDF and
read back with pdftotext, or inspected as Paragraphs. Every expected number is counted from the arrays.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from reportlab.lib.pagesizes import A4
from reportlab.lib.units import mm
from reportlab.platypus import Flowable, Paragraph, SimpleDocTemplate, Table
from tests.conftest import DEMO_PROTOCOL, PATIENT_SPLIT

from sitecal.evaluation import EvaluationData, evaluate
from sitecal.metrics import softmax
from sitecal.metrics.registry import metric as registry_metric
from sitecal.protocol import Protocol
from sitecal.report import ReportInputs
from sitecal.report._cohort import cohort_characteristics
from sitecal.report._context import Context
from sitecal.report._limitations import limitations
from sitecal.report._styles import make_styles, register_fonts
from sitecal.results import Evaluation

HOSTILE = '<b>St. Mary\'s & "Ünïcødé" <font color=red>'
CLASSES = ["normal", "nodule", "effusion"]
FLOW = {
    "files_found": 410,
    "dicom_instances": 404,
    "studies": 402,
    "labelled": 400,
    "analysed": 400,
    "exclusions": [
        {"stage": "scan", "reason": "not a DICOM file", "count": 6},
        {"stage": "labels", "reason": "study has no label", "count": 2},
        {"stage": "labels", "reason": "label matches no study", "count": 1},
    ],
}
Document = dict[str, Any]


def _data(seed: int = 11) -> EvaluationData:
    rng = np.random.default_rng(seed)
    scanner = np.array(["A"] * 180 + ["B"] * 160 + [HOSTILE] * 40 + ["unknown"] * 20)
    n = len(scanner)
    z = rng.normal(size=(n, 3)) * 3.0
    labels = (softmax(z, temperature=1.8).cumsum(axis=1) > rng.random((n, 1))).argmax(axis=1)
    site = np.where(np.arange(n) % 8 == 0, "unknown", "Northgate")  # 50 unknown
    sex = np.array(["F", "M"])[rng.integers(0, 2, n)]
    age = np.array(["0–39", "40–59", "60–79", "80+"])[rng.integers(0, 4, n)]
    order = rng.permutation(n)  # rows in no particular order
    return EvaluationData(
        logits=z[order],
        labels=labels[order],
        patient_keys=np.array([f"P-{i // 2:04x}" for i in range(n)]),
        attributes={
            "scanner": scanner[order],
            "site": site[order],
            "sex": sex[order],
            "age_band": age[order],
        },
        class_names=CLASSES,
        study_keys=np.array([f"S-{i:04x}" for i in range(n)]),
    )


def _protocol(*, sex: bool = True) -> Protocol:
    raw = yaml.safe_load(DEMO_PROTOCOL.read_text())
    raw["calibration"]["split"] = dict(PATIENT_SPLIT)
    raw["subgroups"].pop("sex_age", None)  # the hand-built cohorts here carry the tag subgroups only
    raw["evaluation"]["bootstrap"].update({"n_resamples": 50, "refit": False})
    raw["evaluation"]["disparity_metrics"] = ["ece"]
    raw["calibration"]["min_group_size"] = 15
    if not sex:
        del raw["subgroups"]["sex"]
    return Protocol.model_validate(raw)


@pytest.fixture(scope="module")
def data() -> EvaluationData:
    return _data()


@pytest.fixture(scope="module")
def document(data: EvaluationData) -> Document:
    out = evaluate(_protocol(), data, cohort_flow=FLOW, protocol_sha256="0" * 64)
    doc: Document = json.loads(json.dumps(out.document))  # as read back from evaluation.json
    Evaluation.from_dict(doc)
    return doc


def _context(doc: Document, width: float = A4[0] - 36 * mm) -> Context:
    inputs = ReportInputs(doc, {}, {}, {"name": "test"})
    return Context(inputs=inputs, styles=make_styles(register_fonts()), width=width, figures_dir=Path("."))


def _render(doc: Document, path: Path, text: Callable[[Path], str]) -> str:
    """Both sections in a small A4 PDF; the text with runs of white space made single spaces."""
    ctx = _context(doc)
    pdf = SimpleDocTemplate(str(path), pagesize=A4, leftMargin=18 * mm, rightMargin=18 * mm)
    pdf.build(cohort_characteristics(ctx) + limitations(ctx))
    return " ".join(text(path).split())


def _paragraphs(flowables: list[Flowable]) -> Iterator[Paragraph]:
    for f in flowables:
        if isinstance(f, Paragraph):
            yield f
        elif isinstance(f, Table):
            for row in f._cellvalues:
                yield from _paragraphs([c for c in row if isinstance(c, Flowable)])


def _plain(p: Paragraph) -> str:
    return "".join(getattr(frag, "text", "") for frag in p.frags)


def test_sections_print_the_numbers_of_the_evaluation(
    document: Document, data: EvaluationData, tmp_path: Path, poppler_text: Callable[[Path], str]
) -> None:
    text = _render(document, tmp_path / "sections.pdf", poppler_text)
    assert "1 Cohort characteristics" in text and "2 Limitations" in text
    # The hostile scanner is printed as typed, never read as markup; it is small in the evaluation split.
    held = data.attributes["scanner"][~_fit(document, data)]
    n_small = int((held == HOSTILE).sum())
    assert 0 < n_small < 30
    assert f"Scanner ‘{HOSTILE}’ (n = {n_small}" in text
    # Unknown sites: 50 of 400 by construction (every 8th row), 12.5%.
    assert int((data.attributes["site"] == "unknown").sum()) == 50
    assert "Site (InstitutionName): 50 of 400 (12.5%)" in text
    assert "Scanner (ManufacturerModelName): 20 of 400 (5.0%)" in text
    assert "Sex (PatientSex): 0 of 400" in text
    assert "removes InstitutionName, StationName and PatientAge" in text
    assert (
        "Site is read from InstitutionName; Sex is read from PatientSex; Age band is read from PatientAge"
        in text
    )
    # Exclusions: 6 + 2 + 1 = 9 records against 410 files found, 9 / 410 = 2.195...% -> 2.2%.
    assert "9 exclusion records against 410 files found (2.2%)" in text
    assert "not a DICOM file (scan): 6" in text
    # Highest-confidence errors: in the document's order, by key, with the hand-checked total.
    errors = document["highest_confidence_errors"]
    assert len(errors["studies"]) == 10
    positions = [text.index(s["study_key"]) for s in errors["studies"]]
    assert positions == sorted(positions)
    assert f"{errors['n_errors']} have a wrong top label after calibration" in text


def _fit(doc: Document, data: EvaluationData) -> np.ndarray:
    """The fit rows, recovered from the characteristics' overall counts and split_patients (same seed)."""
    from sitecal.evaluation import split_patients

    protocol = _protocol()
    fit = split_patients(
        data.patient_keys,
        data.attributes["scanner"],
        fit_fraction=protocol.calibration.split.fit_fraction,
        seed=protocol.calibration.split.seed,
    )
    assert int(fit.sum()) == doc["characteristics"]["overall"]["n_fit"]
    return fit


def test_widest_intervals_are_those_of_the_document(
    document: Document, tmp_path: Path, poppler_text: Callable[[Path], str]
) -> None:
    text = _render(document, tmp_path / "widest.pdf", poppler_text)
    rows = [("overall", document["overall"])] + [
        (a, g) for a, groups in document["subgroups"].items() for g in groups
    ]
    for metric in document["metrics"]:
        widths = sorted(
            (
                (g["metrics"][metric]["after"]["high"] - g["metrics"][metric]["after"]["low"], a, g)
                for a, g in rows
            ),
            key=lambda w: -w[0],
        )
        width, _, group = widths[0]
        after = group["metrics"][metric]["after"]
        printed = f"{after['estimate']:.3f} [{after['low']:.3f}, {after['high']:.3f}] {width:.3f}"
        assert printed in text, (metric, printed)


def test_cohort_table_cells_hold_the_hostile_name_literally(document: Document, data: EvaluationData) -> None:
    flowables = cohort_characteristics(_context(document))
    cells = [_plain(p) for p in _paragraphs(flowables)]
    assert HOSTILE in cells
    i = cells.index(HOSTILE)
    n = int((data.attributes["scanner"] == HOSTILE).sum())
    assert cells[i + 1].startswith(f"{n} ({n / 400 * 100:.1f}%)")  # 40 (10.0%)
    labels = data.labels[data.attributes["scanner"] == HOSTILE]
    counts = np.bincount(labels, minlength=3)
    # One line per class, "name  count (share)"; the line breaks carry no text.
    shares = [f"{c}\xa0\xa0{k} ({k / n * 100:.1f}%)" for c, k in zip(CLASSES, counts.tolist(), strict=True)]
    assert cells[i + 3] == "".join(shares)
    assert "unknown" in cells  # the unknown scanner group is shown like any other


def test_old_documents_without_the_new_keys_say_so(
    document: Document, tmp_path: Path, poppler_text: Callable[[Path], str]
) -> None:
    old = copy.deepcopy(document)
    del old["characteristics"], old["highest_confidence_errors"]
    text = _render(old, tmp_path / "old.pdf", poppler_text)
    assert "Cohort characteristics: not recorded in this run's evaluation.json." in text
    assert "Highest-confidence errors: not recorded in this run's evaluation.json." in text
    # Unknown counts fall back to the evaluation split's groups, and say so.
    held_unknown = next(g["n"] for g in document["subgroups"]["site"] if g["group"] == "unknown")
    n_eval = document["overall"]["n"]
    assert f"Site: {held_unknown} of {n_eval}" in text
    assert "whole-cohort counts are not recorded in this run's evaluation.json" in text


def test_protocol_without_sex_says_so_and_uid_keys_are_never_printed(
    data: EvaluationData, tmp_path: Path, poppler_text: Callable[[Path], str]
) -> None:
    uids = np.array([f"1.2.826.0.1.3680043.8.498.{i}" for i in range(len(data.labels))])
    leaky = EvaluationData(
        data.logits, data.labels, data.patient_keys, data.attributes, CLASSES, study_keys=uids
    )
    doc = json.loads(
        json.dumps(evaluate(_protocol(sex=False), leaky, cohort_flow=FLOW, protocol_sha256="0" * 64).document)
    )
    text = _render(doc, tmp_path / "nosex.pdf", poppler_text)
    assert "The protocol has no subgroup read from PatientSex: the sex mix is not described." in text
    assert "No study is listed: the study keys look like DICOM UIDs" in text
    assert "1.2.826" not in text


def test_an_inconclusive_group_is_named_with_its_interval_and_margin(
    document: Document, tmp_path: Path, poppler_text: Callable[[Path], str]
) -> None:
    doc = copy.deepcopy(document)
    criterion = next(c for c in doc["acceptance"] if c["scope"] == "scanner")
    result = next(r for r in criterion["results"] if r["verdict"] not in ("insufficient data",))
    margin = (result["estimate"] + result["high"]) / 2  # the interval straddles it
    criterion["upper_margin"] = margin
    for r in criterion["results"]:
        r["verdict"] = "inconclusive" if r["group"] == result["group"] else "pass"
    text = " ".join(_render(doc, tmp_path / "straddle.pdf", poppler_text).split())
    interval = f"{result['estimate']:.3f} [{result['low']:.3f}, {result['high']:.3f}]"
    label = registry_metric(criterion["metric"]).label
    if criterion["metric"] == "ece_debiased" and result["estimate"] == 0.0:
        # a clamped debiased ECE is never printed as an error of 0.000
        interval = (
            f"< noise [{result['low']:.3f}, {result['high']:.3f}] (clamped at 0: the observed gaps are "
            "smaller than sampling noise)"
        )
        assert f"interval 0.000 [{result['low']:.3f}" not in text
    assert (
        f"Scanner ‘{result['group']}’: {criterion['id']} needs {label} below {margin:g}; its estimate and "
        f"interval {interval} straddle the margin (n = {result['n']})"
    ) in text


def test_one_global_temperature_is_named_as_such(
    document: Document, tmp_path: Path, poppler_text: Callable[[Path], str]
) -> None:
    text = _render(document, tmp_path / "per.pdf", poppler_text)
    assert "Calibration group (Scanner)" in text
    doc = copy.deepcopy(document)
    doc["calibration_attribute"] = None
    text = _render(doc, tmp_path / "global.pdf", poppler_text)
    assert text.count("all studies (one temperature)") == len(doc["highest_confidence_errors"]["studies"])
