"""Appendix crosswalk: each TRIPOD+AI and CLAIM 2024 item and the report section that answers it.

Item lists (numbers as published, topics paraphrased in a few words, not quoted):

- TRIPOD+AI: Collins GS, Moons KGM, Dhiman P, et al. TRIPOD+AI statement: updated guidance for reporting
  clinical prediction models that use regression or machine learning methods. BMJ 2024;385:e078378.
  27 main items, 52 with their sub-items; items marked [D] only (development) are answered
  "not applicable: development-only item".
- CLAIM 2024: Tejani AS, Klontzas ME, Gatti AA, et al. Checklist for Artificial Intelligence in Medical
  Imaging (CLAIM): 2024 Update. Radiol Artif Intell 2024;6(4):e240300. 44 items.

Each item's answer is a short code (see :func:`_answer`): ``§Title`` or ``§Title/Subtitle`` (a section of
this report; ``|`` separates titles to try in order), ``dev`` (development-only), ``na:<reason>``,
``site:<field>`` (a ``report.governance`` statement), ``design:<field>`` (a ``report.design`` fact,
printed in the Data section's Sources), ``by:<what>`` (for the site to supply elsewhere);
several answers are joined with `` + ``. Section numbers are resolved from the headings as the document
was built (``Context.headings``), so the crosswalk is the last builder.

When the model was not run here (its outputs read from a predictions file), the items about how the
images were prepared and the predictions computed are answered by :data:`READ_FROM_FILE` instead: the
Methods section says where the outputs came from, and how they were computed is for the site to obtain
from whoever produced the file.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from reportlab.platypus import Flowable

from ._context import Context
from ._data import DESIGN_FIELDS, design_text
from ._governance import GOVERNANCE_FIELDS, governance_text
from ._model_outputs import predictions_record
from ._styles import table

__all__ = [
    "CLAIM_2024",
    "NOT_PLANNED",
    "READ_FROM_FILE",
    "TRIPOD_AI",
    "Answer",
    "appendix_crosswalk",
    "crosswalk_rows",
]

DEV_ONLY = "not applicable: development-only item"
TITLE_PAGE = "Title page"

# (item, topic paraphrase, answer code)
TRIPOD_AI: tuple[tuple[str, str, str], ...] = (
    ("1", "Title: evaluation of a prediction model, population, outcome", "§Title page"),
    ("2", "Abstract (TRIPOD+AI for Abstracts)", "§Title page"),
    ("3a", "Healthcare context and rationale", "§Intended use"),
    ("3b", "Target population, intended purpose and users", "§Intended use + site:human_oversight"),
    ("3c", "Known health inequalities between groups", "§Fairness"),
    ("4", "Objectives: development, validation or both", "§Intended use"),
    ("5a", "Data sources and their representativeness", "§Data/Sources|Data|Cohort flow"),
    ("5b", "Dates of the data collected", "§Data/Sources|Data|Cohort characteristics"),
    ("6a", "Setting, number and location of centres", "§Data/Sources|Cohort characteristics"),
    ("6b", "Eligibility criteria", "§Data/Eligibility|Data|Cohort flow"),
    ("6c", "Treatments received and how handled", "by:treatments received, where relevant"),
    ("7", "Data pre-processing and quality checks", "§Methods"),
    ("8a", "Outcome definition and its assessment", "site:reference_standard"),
    ("8b", "Qualifications of outcome assessors", "site:reference_standard"),
    ("8c", "Blinding of outcome assessment", "site:reference_standard"),
    ("9a", "Choice of initial predictors", "dev"),
    ("9b", "Definition and measurement of predictors", "§Methods"),
    ("9c", "Qualifications of predictor assessors", "na:the predictors are the images; no reader"),
    # the planned size of every judged group (NOT_PLANNED where the run planned none)
    ("10", "Study size and its justification", "§Acceptance criteria/Study size"),
    ("11", "Handling of missing data", "§Data/Flow|Data|Cohort flow"),
    ("12a", "How the data were used and partitioned", "§Methods"),
    ("12b", "Handling of predictors in the analysis", "dev"),
    ("12c", "Model type, building steps, tuning, internal validation", "dev"),
    (
        "12d",
        "Heterogeneity across clusters (sites)",
        "§Sensitivity analyses/Heterogeneity across sites|Sensitivity analyses|Limitations",
    ),
    ("12e", "Performance measures and plots", "§Methods"),
    ("12f", "Model updating (recalibration)", "§Fitted temperatures|Fitted calibration"),
    ("12g", "How the predictions were calculated", "§Provenance"),
    ("13", "Class imbalance methods", "na:no class-imbalance method is applied in a validation"),
    ("14", "Approaches to model fairness", "§Fairness"),
    ("15", "Model output and any thresholds", "§Methods"),
    ("16", "Differences between development and evaluation data", "by:differences from the development data"),
    ("17", "Ethics approval and consent", "site:ethics_approval"),
    ("18a", "Funding and the funders' role", "by:funding statement"),
    ("18b", "Conflicts of interest", "by:conflicts of interest"),
    ("18c", "Where the protocol can be accessed", "§Appendix/Protocol as run"),
    ("18d", "Registration", "by:registration, or a statement that there is none"),
    ("18e", "Availability of the data", "by:data availability statement"),
    ("18f", "Availability of the analytical code", "§Provenance"),
    ("19", "Patient and public involvement", "by:patient and public involvement"),
    ("20a", "Flow of participants, with and without the outcome", "§Data/Flow|Data|Cohort flow"),
    ("20b", "Characteristics overall and per source or setting", "§Cohort characteristics"),
    ("20c", "Comparison with the development data", "by:distribution of the development data"),
    ("21", "Numbers of participants and events in each analysis", "§Results"),
    ("22", "Full model specification", "dev"),
    ("23a", "Performance with confidence intervals, key subgroups", "§Results"),
    (
        "23b",
        "Heterogeneity of performance across clusters",
        "§Sensitivity analyses/Heterogeneity across sites|Sensitivity analyses|Limitations",
    ),
    ("24", "Results of model updating", "§Fitted temperatures|Fitted calibration"),
    ("25", "Overall interpretation, fairness included", "site:interpretation"),
    ("26", "Limitations", "§Limitations"),
    ("27a", "Handling poor or unavailable input data in use", "dev"),
    ("27b", "User interaction and expertise required", "dev"),
    ("27c", "Next steps for research and applicability", "§Limitations"),
)

CLAIM_2024: tuple[tuple[str, str, str], ...] = (
    ("1", "Identification as an AI study, category of technology", "§Title page"),
    ("2", "Structured summary", "§Title page"),
    ("3", "Background, intended use and role of the AI", "§Intended use"),
    ("4", "Aims, objectives and hypotheses", "§Intended use"),
    ("5", "Prospective or retrospective study", "design:collection"),
    ("6", "Study goal", "§Intended use"),
    ("7", "Data sources", "§Data/Sources|Data|Cohort flow"),
    ("8", "Inclusion and exclusion criteria", "§Data/Eligibility|Data|Cohort flow"),
    ("9", "Data pre-processing", "§Methods"),
    ("10", "Selection of data subsets", "§Data/Eligibility|Data|Cohort flow"),
    ("11", "De-identification", "§Provenance"),
    ("12", "Missing data", "§Data/Flow|Data|Cohort flow"),
    ("13", "Image acquisition protocol", "design:acquisition"),
    ("14", "Method used to obtain the reference standard", "site:reference_standard"),
    ("15", "Rationale for the reference standard", "site:reference_standard"),
    ("16", "Source of reference-standard annotations, annotators", "site:reference_standard"),
    ("17", "Annotation of the test set", "site:reference_standard"),
    ("18", "Inter- and intra-rater variability", "site:reference_standard"),
    ("19", "How data were assigned to partitions", "§Methods"),
    ("20", "Level at which partitions are disjoint", "§Methods"),
    ("21", "Intended sample size", "§Methods + §Acceptance criteria/Study size"),
    ("22", "Detailed description of the model", "dev"),
    ("23", "Software libraries, frameworks and packages", "§Provenance"),
    ("24", "Initialisation of model parameters", "dev"),
    ("25", "Details of the training approach", "dev"),
    ("26", "Method of selecting the final model", "dev"),
    ("27", "Ensembling", "dev"),
    ("28", "Metrics of model performance", "§Methods"),
    ("29", "Statistical significance and uncertainty", "§Methods"),
    ("30", "Robustness or sensitivity analysis", "§Sensitivity analyses|Limitations"),
    ("31", "Explainability or interpretability methods", "na:no explainability method is applied"),
    ("32", "Evaluation on internal data", "§Results"),
    ("33", "Testing on external data", "§Results"),
    ("34", "Clinical trial registration", "by:registration, or a statement that there is none"),
    ("35", "Numbers of patients or examinations included and excluded", "§Data/Flow|Data|Cohort flow"),
    ("36", "Demographic and clinical characteristics per partition", "§Cohort characteristics"),
    ("37", "Performance metrics with statistical uncertainty", "§Results"),
    ("38", "Estimates of diagnostic performance and precision", "§Results + §Acceptance criteria"),
    ("39", "Failure analysis of incorrect results", "§Limitations/Highest-confidence errors|Limitations"),
    ("40", "Study limitations", "§Limitations"),
    (
        "41",
        "Implications for practice, intended use and clinical role",
        "site:interpretation + site:human_oversight",
    ),
    ("42", "Reference to the full protocol", "§Appendix/Protocol as run"),
    ("43", "Availability of software, model and data", "§Provenance + by:data availability statement"),
    ("44", "Funding and the funders' role", "by:funding statement"),
)

GUIDELINES: tuple[tuple[str, tuple[tuple[str, str, str], ...]], ...] = (
    ("TRIPOD+AI (2024)", TRIPOD_AI),
    ("CLAIM 2024", CLAIM_2024),
)

_BY_SUPPLIER = "by:how the images were prepared and the predictions computed, from whoever produced the file"
#: (guideline, item) → answer code when the model's outputs were read from a predictions file
READ_FROM_FILE: dict[tuple[str, str], str] = {
    ("TRIPOD+AI (2024)", "7"): f"§Methods + {_BY_SUPPLIER}",
    ("TRIPOD+AI (2024)", "9b"): f"§Methods + {_BY_SUPPLIER}",
    ("TRIPOD+AI (2024)", "12g"): f"§Methods + {_BY_SUPPLIER}",
    ("CLAIM 2024", "9"): f"§Methods + {_BY_SUPPLIER}",
}

#: (guideline, item) → answer code when the run planned no study size (``evaluation.planning`` absent)
NOT_PLANNED: dict[tuple[str, str], str] = {
    ("TRIPOD+AI (2024)", "10"): "by:the sample-size calculation behind the study size",
    ("CLAIM 2024", "21"): "§Methods + by:how the intended sample size was determined",
}


@dataclass(frozen=True)
class Answer:
    """Where one item is answered, as printed; ``sections`` are the (number, title) pairs it refers to."""

    text: str
    sections: tuple[tuple[str, str], ...] = ()
    missing: tuple[str, ...] = ()  # section titles this report does not (yet) have


def _find(ctx: Context, target: str) -> tuple[str, str] | None:
    """The number and printed title of the first heading matching ``target`` (``Title`` or ``Title/Sub``)."""
    chapter, _, sub = target.partition("/")

    def matches(heading: str, wanted: str) -> bool:
        heading, wanted = heading.lower(), wanted.lower()
        return heading == wanted or (heading.startswith(wanted) and not heading[len(wanted)].isalnum())

    for key, number in ctx.headings.items():
        h1, _, h2 = key.partition("/")
        if matches(h1, chapter) and ((not sub and not h2) or (sub and h2 and matches(h2, sub))):
            return number, h2 or h1
    return None


def _answer(ctx: Context, code: str) -> Answer:
    parts: list[str] = []
    sections: list[tuple[str, str]] = []
    missing: list[str] = []
    labels = {f.name: f for f in GOVERNANCE_FIELDS}
    for piece in (p.strip() for p in code.split(" + ")):
        if piece == "dev":
            parts.append(DEV_ONLY)
        elif piece.startswith("na:"):
            parts.append(f"not applicable: {piece[3:]}")
        elif piece.startswith("by:"):
            parts.append(f"by the site: {piece[3:]}")
        elif piece.startswith("site:"):
            field = labels[piece[5:]]
            found = _find(ctx, "Sign-off")
            if governance_text(ctx.protocol, field.name) is not None and found is not None:
                sections.append(found)
                parts.append(f"{found[0]} {found[1]} (statement: {field.label.lower()})")
            else:
                parts.append(
                    f"by the site: {field.label.lower()}, required before sign-off ({field.protocol_field})"
                )
        elif piece.startswith("design:"):
            what = DESIGN_FIELDS[piece[7:]]
            found = _find(ctx, "Data/Sources")
            if design_text(ctx.protocol, piece[7:]) is not None and found is not None:
                sections.append(found)
                parts.append(f"{found[0]} {found[1]} ({what})")
            else:
                parts.append(f"by the site: {what} (report.design.{piece[7:]})")
        elif piece == f"§{TITLE_PAGE}":
            parts.append(TITLE_PAGE)
        elif piece.startswith("§"):
            targets = piece[1:].split("|")
            hit = next((h for h in (_find(ctx, t) for t in targets) if h is not None), None)
            if hit is None:
                missing.append(targets[0])
                parts.append(f"{targets[0]} (section not in this report)")
            else:
                sections.append(hit)
                parts.append(f"{hit[0]} {hit[1]}")
        else:
            raise ValueError(f"crosswalk answer code {piece!r} is not understood")
    return Answer("; ".join(parts), tuple(sections), tuple(missing))


def crosswalk_rows(ctx: Context) -> list[tuple[str, str, str, Answer]]:
    """Every item of both guidelines: ``(guideline, item, topic, answer)``, in checklist order."""
    overrides = dict(READ_FROM_FILE) if predictions_record(ctx.provenance) is not None else {}
    if not isinstance(ctx.evaluation.get("planning"), Mapping):
        overrides |= NOT_PLANNED
    return [
        (guideline, item, topic, _answer(ctx, overrides.get((guideline, item), code)))
        for guideline, items in GUIDELINES
        for item, topic, code in items
    ]


def _table(ctx: Context, rows: Iterable[tuple[str, str, str, Answer]]) -> Any:
    w = ctx.width
    cells: list[list[Any]] = [[ctx.head("Item"), ctx.head("Topic (paraphrased)"), ctx.head("Answered in")]]
    for _, item, topic, answer in rows:
        cells.append([ctx.cell(item), ctx.cell(topic), ctx.cell(answer.text)])
    return table(cells, [w * 0.08, w * 0.5, w * 0.42])


def appendix_crosswalk(ctx: Context) -> list[Flowable]:
    """Tables mapping each TRIPOD+AI and CLAIM 2024 item to the section of this report that answers it."""
    rows = crosswalk_rows(ctx)
    story: list[Flowable] = [
        ctx.h2("Reporting-guideline crosswalk"),
        ctx.p(
            "Where this report answers each item of TRIPOD+AI (Collins et al., BMJ 2024;385:e078378) and of "
            "CLAIM 2024 (Tejani et al., Radiol Artif Intell 2024;6(4):e240300). Topics are paraphrased; "
            "see the guidelines for the full wording. Items about building a model are "
            f"<i>{DEV_ONLY}</i>: this report validates an existing model. Items marked <i>by the site</i> "
            "are for the site to supply; the Sign-off section lists those required before sign-off.",
        ),
    ]
    for guideline, _ in GUIDELINES:
        story += ctx.table_block(
            f"{guideline} items and where they are answered.",
            _table(ctx, (r for r in rows if r[0] == guideline)),
        )
    return story
