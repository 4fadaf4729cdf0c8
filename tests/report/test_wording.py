"""The report words the codes evaluation.json stores, each in one place (sitecal.report._wording).

The words are those the evaluation wrote into the document before it stored codes (schema_version 1), so
that the printed report did not change: the table below pins them.
"""

from __future__ import annotations

import copy
import typing
from pathlib import Path
from typing import Any

import pytest
from tests.report.sections import render_section

from sitecal.report._sections import title_page
from sitecal.report._text import NOT_RECORDED
from sitecal.report._wording import WORDS, criterion_text, word
from sitecal.results._kinds import CODE_VOCABULARIES

BOOTSTRAP = {"method": "percentile", "n_resamples": 100, "seed": 7, "level": 0.95}

#: code, its fields, the sentence the evaluation stored before it stored the code
BEFORE = [
    (
        "small_group",
        {"label": "Scanner", "group": "FCR Demo CR", "n": 18, "min_group_size": 30},
        "Scanner 'FCR Demo CR' has 18 studies (< 30) in the evaluation split: its intervals are wide and it "
        "is not judged.",
    ),
    (
        "no_interval_shrunk",
        {},
        "no interval: a shrunk temperature's penalty weight is chosen from the data, which the bootstrap "
        "does not repeat; its after-calibration intervals hold T fixed",
    ),
    (
        "too_few_groups",
        {"min_group_size": 120, "sizes": {"0–39": 44, "80+": 15}},
        "disparity_intervals needs at least two groups with at least 120 rows. Got sizes {'0–39': 44, "
        "'80+': 15}.",
    ),
    (
        "every_prediction_correct",
        {},
        "every prediction is correct: the logistic fit has no maximum-likelihood estimate",
    ),
    ("no_standard_error", {}, "fewer than two patients: no standard error"),
    ("site_subgroup", {}, "subgroup named 'site'"),
    ("calibration_attribute", {}, "calibration attribute (calibration.per): no subgroup named 'site'"),
    ("no_site_attribute", {}, "no subgroup named 'site' and no calibration attribute"),
    ("site_unknown", {}, "site not recorded ('unknown'): not one site"),
    ("site_too_small", {"min_group_size": 120}, "fewer than 120 studies (evaluation minimum)"),
    ("one_site", {}, "one group: no heterogeneity to measure (Q, I² and tau² need two or more)"),
    ("no_site_pooled", {}, "no site large enough to pool"),
    ("no_fit_studies", {}, "no fit studies remain"),
    (
        "no_sex_attribute",
        {},
        "The protocol has no subgroup read from PatientSex: the sex mix is not described.",
    ),
    (
        "study_keys_look_like_uids",
        {},
        "the study keys look like DICOM UIDs and are not listed: pseudonymise them first",
    ),
    ("wald_cluster_robust", BOOTSTRAP, "Wald, cluster-robust (patient) sandwich standard error"),
    (
        "cluster_bootstrap",
        BOOTSTRAP,
        "patient-cluster bootstrap (percentile, 100 resamples, seed 7); temperatures held fixed",
    ),
    (
        "refit_by_protocol_policy",
        {},
        "temperatures refitted by the protocol's policy on the remaining fit part",
    ),
    (
        "replicates_equal_one_cluster",
        BOOTSTRAP,
        "All 100 bootstrap replicates are equal (one cluster): the interval has zero width and does not "
        "measure sampling uncertainty",
    ),
]


def test_every_code_is_worded_and_every_wording_is_a_code() -> None:
    codes = {code for vocabulary in CODE_VOCABULARIES for code in typing.get_args(vocabulary)}
    assert set(WORDS) == codes


@pytest.mark.parametrize("code", sorted(WORDS))
def test_every_wording_gives_text_from_the_fields_it_is_stored_with(code: str) -> None:
    fields: dict[str, Any] = {
        **BOOTSTRAP,
        "label": "Site",
        "group": "North",
        "n": 12,
        "min_group_size": 30,
        "sizes": {"North": 12, "River": 40},
    }
    text = word(code, fields)
    assert text and text != code


@pytest.mark.parametrize(("code", "fields", "text"), BEFORE, ids=[c for c, _, _ in BEFORE])
def test_the_words_are_those_the_evaluation_used_to_store(
    code: str, fields: dict[str, Any], text: str
) -> None:
    assert word(code, fields) == text


def test_no_code_and_an_unknown_code() -> None:
    assert (
        word(None) == NOT_RECORDED
        and word(None, missing="no site could be pooled") == "no site could be pooled"
    )
    assert word("a_code_of_a_later_sitecal") == "a_code_of_a_later_sitecal"


@pytest.mark.parametrize(
    ("fields", "text"),
    [
        (
            {"metric": "ece", "stage": "after", "rule": "below", "upper_margin": 0.2},
            "ECE after calibration below 0.2 in every scanner group",
        ),
        (
            {"metric": "accuracy", "stage": "after", "rule": "above", "lower_margin": 0.7},
            "ACCURACY after calibration above 0.7 in every scanner group",
        ),
        (
            {
                "metric": "slope",
                "stage": "before",
                "rule": "within",
                "lower_margin": 0.8,
                "upper_margin": 1.25,
            },
            "SLOPE before calibration within [0.8, 1.25] in every scanner group",
        ),
    ],
)
def test_a_criterion_without_description_is_worded_from_its_fields(fields: dict[str, Any], text: str) -> None:
    assert criterion_text({**fields, "scope": "scanner"}) == text
    overall = criterion_text({**fields, "scope": "overall"})
    assert overall == text.replace("in every scanner group", "overall")


def test_the_title_page_words_warnings_and_criteria(tmp_path: Path, raw: dict[str, Any]) -> None:
    evaluation = copy.deepcopy(raw["evaluation"])
    evaluation["acceptance"][1]["description"] = None  # the protocol gave none
    text = " ".join(render_section(tmp_path, title_page, evaluation, protocol=raw["protocol"]).split())
    assert "ECE after calibration below 0.12 in every scanner group" in text
    # page 1 names the group that does not pass with its figure, and the margin
    result = next(r for r in evaluation["acceptance"][1]["results"] if r["verdict"] == "inconclusive")
    figure = f"{result['estimate']:.3f} [{result['low']:.3f}, {result['high']:.3f}]"
    needed = result["study_size"]["needed"]
    assert needed > result["n"]  # it has fewer studies than planned: page 1 says how many it would need
    assert (
        f"{result['group']}: {figure} (inconclusive; n = {result['n']}; about {needed} needed if it were "
        "perfectly calibrated, but its estimate is near the margin, so more studies may not settle it)"
    ) in text
    assert "margin: below 0.12" in text
    assert (
        "Scanner 'Fujifilm FDR Go PLUS' has 28 studies (< 30) in the evaluation split: its intervals are "
        "wide and it is not judged." in text
    )
    assert "Sex 'Unknown' has 5 studies (< 30)" in text
