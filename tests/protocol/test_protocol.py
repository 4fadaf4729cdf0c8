from __future__ import annotations

import re
from pathlib import Path

import pytest
from tests.conftest import DEMO_PROTOCOL

from sitecal.errors import ProtocolError
from sitecal.protocol import load_protocol


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return path


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_demo_protocol_loads_and_resolves_paths() -> None:
    loaded = load_protocol(DEMO_PROTOCOL)
    p = loaded.protocol
    assert p.name == "demo"
    assert p.calibration.per == "scanner"
    assert loaded.dicom_dir == (DEMO_PROTOCOL.parent / "radiographs/dicom").resolve()
    assert loaded.model_path.name == "demo_cnn.safetensors"
    assert len(loaded.sha256) == 64
    assert p.reported_subgroups == ["scanner", "site", "sex", "age_band", "sex_age"]


def test_misspelt_key_names_file_line_field_and_guess(tmp_path: Path, demo_protocol_text: str) -> None:
    text = demo_protocol_text.replace("  per: scanner", "  pre: scanner")
    path = _write(tmp_path, text)
    with pytest.raises(ProtocolError) as info:
        load_protocol(path)
    line = _line_of(text, "pre: scanner")
    assert f"{path}:{line}: calibration.pre: unknown field. Did you mean 'per'?" in str(info.value)


def test_wrong_type_names_line(tmp_path: Path, demo_protocol_text: str) -> None:
    text = demo_protocol_text.replace("n_bins: 15", "n_bins: fifteen")
    path = _write(tmp_path, text)
    with pytest.raises(ProtocolError) as info:
        load_protocol(path)
    assert f"{path}:{_line_of(text, 'n_bins: fifteen')}: evaluation.n_bins:" in str(info.value)


def test_unknown_subgroup_reference_is_located(tmp_path: Path, demo_protocol_text: str) -> None:
    text = demo_protocol_text.replace("    scope: scanner", "    scope: scaner")
    path = _write(tmp_path, text)
    with pytest.raises(ProtocolError) as info:
        load_protocol(path)
    message = str(info.value)
    assert f"{path}:{_line_of(text, 'scope: scaner')}: acceptance.0.scope:" in message
    assert "Did you mean 'scanner'?" in message


def test_identifying_tag_refused_as_subgroup(tmp_path: Path, demo_protocol_text: str) -> None:
    text = demo_protocol_text.replace("tag: PatientSex", "tag: PatientID")
    with pytest.raises(ProtocolError, match="'PatientID' identifies patients"):
        load_protocol(_write(tmp_path, text))


def test_not_a_dicom_keyword(tmp_path: Path, demo_protocol_text: str) -> None:
    text = demo_protocol_text.replace("tag: InstitutionName", "tag: InstitutonName")
    with pytest.raises(
        ProtocolError, match=r"'InstitutonName' is not a DICOM keyword\. Did you mean 'InstitutionName'"
    ):
        load_protocol(_write(tmp_path, text))


def test_duplicate_key(tmp_path: Path, demo_protocol_text: str) -> None:
    text = demo_protocol_text.replace("name: demo\n", "name: demo\nname: other\n", 1)
    with pytest.raises(ProtocolError, match=r"p.yaml:4: 'name' appears twice .*first on line 3"):
        load_protocol(_write(tmp_path, text))


def test_invalid_yaml_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ProtocolError, match=r"p.yaml:2: invalid YAML"):
        load_protocol(_write(tmp_path, "name: [demo\nx: 1\n"))
    with pytest.raises(ProtocolError, match="protocol file not found"):
        load_protocol(tmp_path / "absent.yaml")


def test_yaml_tags_are_not_executed(tmp_path: Path) -> None:
    with pytest.raises(ProtocolError, match="invalid YAML"):
        load_protocol(_write(tmp_path, "name: !!python/object/apply:os.system ['echo hi']\n"))


def test_acceptance_needs_exactly_one_bound(tmp_path: Path, demo_protocol_text: str) -> None:
    text = demo_protocol_text.replace("    below: 0.10\n", "")
    path = _write(tmp_path, text)
    with pytest.raises(
        ProtocolError, match=r"acceptance.0: give exactly one of 'below', 'above' or 'within: \[low, high\]'"
    ):
        load_protocol(path)


_GOVERNANCE = (
    "  governance:\n"
    "    ethics_approval: Approved by the regional ethics committee, ref. REC 26/LO/0001; consent waived.\n"
    "    reference_standard: Two consultant radiologists, blinded to the model; a third resolved disputes.\n"
    "    interpretation: Calibrated probabilities are honest at every site except the small scanner.\n"
    "    human_oversight: Radiologists see the probability next to the image and report every study.\n"
)


def _with_governance(text: str, governance: str) -> str:
    assert "\nreport:\n" in text
    return text.replace("\nreport:\n", "\nreport:\n" + governance, 1)


def test_governance_statements_reach_the_report(tmp_path: Path, demo_protocol_text: str) -> None:
    from sitecal.protocol import protocol_summary

    loaded = load_protocol(_write(tmp_path, _with_governance(demo_protocol_text, _GOVERNANCE)))
    governance = protocol_summary(loaded)["governance"]
    assert governance == {
        "ethics_approval": "Approved by the regional ethics committee, ref. REC 26/LO/0001; consent waived.",
        "reference_standard": "Two consultant radiologists, blinded to the model; a third resolved disputes.",
        "interpretation": "Calibrated probabilities are honest at every site except the small scanner.",
        "human_oversight": "Radiologists see the probability next to the image and report every study.",
    }


def test_governance_is_optional_and_missing_fields_are_none(tmp_path: Path, demo_protocol_text: str) -> None:
    from sitecal.protocol import protocol_summary

    assert not re.search(r"^\s*governance:", demo_protocol_text, re.M)  # only a commented example
    assert set(protocol_summary(load_protocol(DEMO_PROTOCOL))["governance"].values()) == {None}
    partial = "  governance:\n    ethics_approval: REC 26/LO/0001\n"
    loaded = load_protocol(_write(tmp_path, _with_governance(demo_protocol_text, partial)))
    assert protocol_summary(loaded)["governance"] == {
        "ethics_approval": "REC 26/LO/0001",
        "reference_standard": None,
        "interpretation": None,
        "human_oversight": None,
    }


@pytest.mark.parametrize("value", ['""', '"   "'])
def test_blank_governance_statement_is_refused_with_its_line(
    tmp_path: Path, demo_protocol_text: str, value: str
) -> None:
    text = _with_governance(demo_protocol_text, f"  governance:\n    interpretation: {value}\n")
    path = _write(tmp_path, text)
    with pytest.raises(ProtocolError) as info:
        load_protocol(path)
    line = _line_of(text, "interpretation:")
    assert f"{path}:{line}: report.governance.interpretation: must be a non-empty text" in str(info.value)


def test_governance_statement_must_be_text_and_field_names_are_checked(
    tmp_path: Path, demo_protocol_text: str
) -> None:
    text = _with_governance(demo_protocol_text, "  governance:\n    human_oversight: [a, b]\n")
    path = _write(tmp_path, text)
    with pytest.raises(
        ProtocolError, match=r"report\.governance\.human_oversight: Input should be a valid string"
    ):
        load_protocol(path)
    text = _with_governance(demo_protocol_text, "  governance:\n    ethics_aproval: REC 1\n")
    path = _write(tmp_path, text)
    with pytest.raises(
        ProtocolError, match=r"report\.governance\.ethics_aproval: unknown field\. Did you mean "
    ):
        load_protocol(path)


def test_smooth_ece_may_be_reported_but_not_judged(tmp_path: Path, demo_protocol_text: str) -> None:
    reported = demo_protocol_text.replace(
        "metrics: [ece, ece_debiased, nll, brier, accuracy]",
        "metrics: [ece, ece_debiased, smooth_ece, accuracy]",
    )
    p = load_protocol(_write(tmp_path, reported)).protocol
    assert p.evaluation.metrics == ["ece", "ece_debiased", "smooth_ece", "accuracy"]
    for name, label in (("smooth_ece", "Smooth ECE"), ("ece", "ECE")):
        judged = reported.replace("    metric: ece_debiased\n", f"    metric: {name}\n")
        path = _write(tmp_path, judged)
        with pytest.raises(ProtocolError) as info:
            load_protocol(path)
        line = _line_of(judged, f"    metric: {name}\n".strip())
        assert (
            f"{path}:{line}: acceptance.0.metric: '{name}' cannot be judged against a margin: the "
            f"{label} is a plug-in estimate, biased upward on small groups, and its interval does not "
            "contain the true value (for a calibrated group, never), so a criterion on it fails good "
            "groups. Judge calibration on 'ece_debiased'"
        ) in str(info.value)


def test_smooth_ece_is_refused_as_a_disparity_metric_with_its_line(
    tmp_path: Path, demo_protocol_text: str
) -> None:
    # gaps between groups are computed from per-patient sums; the smooth ECE is not one
    text = demo_protocol_text.replace(
        "disparity_metrics: [ece, calibration_gap, nll]", "disparity_metrics: [ece, smooth_ece]"
    )
    path = _write(tmp_path, text)
    with pytest.raises(ProtocolError) as info:
        load_protocol(path)
    line = _line_of(text, "disparity_metrics: [ece, smooth_ece]")
    assert (
        f"{path}:{line}: evaluation.disparity_metrics: 'smooth_ece' cannot be compared between groups: the "
        "gaps between groups and their flags are computed from per-patient sums of each group's terms, and "
        "Smooth ECE is not a sum of per-study terms (its kernel bandwidth is refitted in every resample). "
        "Keep it in 'evaluation.metrics' and compare groups on one of ece, calibration_gap, oe_ratio, nll, "
        "brier, accuracy"
    ) in str(info.value)


def test_compare_lists_methods_and_refuses_what_it_cannot_compare(
    tmp_path: Path, demo_protocol_text: str
) -> None:
    patient = demo_protocol_text.replace(
        "split: {by: crossfit, folds: 5, seed: 20261202}", "split: {by: patient, seed: 20261202}"
    )
    assert patient != demo_protocol_text
    ok = patient.replace("  per: scanner", "  per: scanner\n  compare: [vector, isotonic]")
    assert load_protocol(_write(tmp_path, ok)).protocol.calibration.compare == ["vector", "isotonic"]
    cases = {
        # the demo model has three classes
        patient.replace("  per: scanner", "  per: scanner\n  compare: [matrix, beta]"): (
            "calibration.compare.1:",
            "beta calibration is for two classes",
        ),
        patient.replace("  per: scanner", "  per: scanner\n  compare: [vector, vector]"): (
            "calibration.compare:",
            "list each method once",
        ),
        patient.replace("  per: scanner", "  per: scanner\n  compare: [platt]"): (
            "calibration.compare.0:",
            "'vector'",
        ),
    }
    for text, (where, what) in cases.items():
        with pytest.raises(ProtocolError) as info:
            load_protocol(_write(tmp_path, text))
        assert where in str(info.value) and what in str(info.value), str(info.value)
