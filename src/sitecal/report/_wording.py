"""The report's words for the codes ``evaluation.json`` stores: one entry per code, in one place.

The evaluation stores no sentence. Where something is missing, left out or not judged it stores a code
(the vocabularies of :mod:`sitecal.results._kinds`) with the numbers and names the sentence needs, and the
sections word it here: :func:`word` maps a code and those fields to plain text (callers escape it for
reportlab with ``para_text``). Notes come without a final full stop (the sections add their own
punctuation); ``small_group`` and the characteristics notes are whole sentences.

>>> word("site_too_small", {"min_group_size": 30})
'fewer than 30 studies (evaluation minimum)'
>>> criterion_text({"metric": "ece", "stage": "after", "rule": "below", "upper_margin": 0.2,
...                 "scope": "scanner"})
'ECE after calibration below 0.2 in every scanner group'
>>> margin_text({"rule": "within", "lower_margin": 0.8, "upper_margin": 1.25})
'within [0.8, 1.25]'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sitecal.report._text import NOT_RECORDED

__all__ = ["WORDS", "criterion_text", "margin_text", "word"]

Fields = Mapping[str, Any]

_SHRUNK = (
    "no interval: a shrunk temperature's penalty weight is chosen from the data, which the bootstrap does "
    "not repeat; its after-calibration intervals hold T fixed"
)
_NO_MLE = "the logistic fit has no maximum-likelihood estimate"
_ZERO_WIDTH = "the interval has zero width and does not measure sampling uncertainty"
_PERCENTILE = "use method='percentile'"


def _replicates(f: Fields) -> str:
    n = f.get("n_resamples")
    return "bootstrap replicates" if n is None else f"{n} bootstrap replicates"


def _small_group(f: Fields) -> str:
    return (
        f"{f['label']} '{f['group']}' has {f['n']} studies (< {f['min_group_size']}) in the evaluation "
        "split: its intervals are wide and it is not judged."
    )


def _too_few_groups(f: Fields) -> str:
    sizes = dict(f.get("sizes") or {})
    return (
        f"disparity_intervals needs at least two groups with at least {f['min_group_size']} rows. "
        f"Got sizes {sizes}."
    )


def _cluster_bootstrap(f: Fields) -> str:
    return (
        f"patient-cluster bootstrap ({f['method']}, {f['n_resamples']} resamples, seed {f['seed']}); "
        f"{f.get('fitted', 'temperatures')} held fixed"
    )


#: Code -> its words, a function of the fields stored beside the code (which fields: the comment).
WORDS: dict[str, Callable[[Fields], str]] = {
    # warnings: label (the attribute's display label), group, n, min_group_size
    "small_group": _small_group,
    # a shrunk temperature's interval
    "no_interval_shrunk": lambda f: _SHRUNK,
    # disparities: min_group_size, sizes
    "too_few_groups": _too_few_groups,
    # bootstrap intervals (sitecal.stats): n_resamples, level where known
    "replicates_not_finite": lambda f: (
        f"some of the {_replicates(f)} are not finite (the statistic is undefined on some resamples); "
        "no interval"
    ),
    "replicates_equal_one_cluster": lambda f: f"All {_replicates(f)} are equal (one cluster): {_ZERO_WIDTH}",
    "replicates_equal_no_variation": lambda f: (
        f"All {_replicates(f)} are equal (no variation between the resampled clusters): {_ZERO_WIDTH}"
    ),
    "bca_estimate_below_replicates": lambda f: (
        f"BCa undefined: the estimate lies below every bootstrap replicate (infinite bias correction); "
        f"{_PERCENTILE}"
    ),
    "bca_estimate_above_replicates": lambda f: (
        f"BCa undefined: the estimate lies above every bootstrap replicate (infinite bias correction); "
        f"{_PERCENTILE}"
    ),
    "bca_acceleration_too_large": lambda f: (
        f"BCa undefined: the acceleration is too large for level {f.get('level', 'the level')}; {_PERCENTILE}"
    ),
    # recalibration slope and intercept (sitecal.metrics.top_label_recalibration)
    "no_correct_prediction": lambda f: f"no prediction is correct: {_NO_MLE}",
    "every_prediction_correct": lambda f: f"every prediction is correct: {_NO_MLE}",
    "confidence_separates": lambda f: (
        "the confidence separates correct from wrong predictions (or takes one value): the slope has no "
        "maximum-likelihood estimate"
    ),
    "fit_not_converged": lambda f: "the logistic fit did not converge in 100 Newton steps",
    "no_standard_error": lambda f: "fewer than two patients: no standard error",
    # where the sites come from (heterogeneity, leave one site out)
    "site_subgroup": lambda f: "subgroup named 'site'",
    "calibration_attribute": lambda f: "calibration attribute (calibration.per): no subgroup named 'site'",
    "no_site_attribute": lambda f: "no subgroup named 'site' and no calibration attribute",
    # a site left out of the pooling: min_group_size
    "site_unknown": lambda f: "site not recorded ('unknown'): not one site",
    "site_too_small": lambda f: f"fewer than {f['min_group_size']} studies (evaluation minimum)",
    "log_oe_undefined": lambda f: "no prediction is correct: log(O/E) is undefined",
    "too_few_clusters": lambda f: "fewer than two clusters: no variance of log(O/E)",
    "zero_variance": lambda f: "zero variance of log(O/E)",
    # a stage of the heterogeneity analysis
    "one_site": lambda f: "one group: no heterogeneity to measure (Q, I² and tau² need two or more)",
    "no_site_pooled": lambda f: "no site large enough to pool",
    # a left-out site's metrics
    "no_evaluation_studies": lambda f: "no evaluation studies remain",
    "no_fit_studies": lambda f: "no fit studies remain",
    "refit_failed": lambda f: (
        f"{f.get('fitted', 'temperatures')} could not be refitted (the reason is in run.log)"
    ),
    # cohort characteristics
    "no_sex_attribute": lambda f: (
        "The protocol has no subgroup read from PatientSex: the sex mix is not described."
    ),
    "no_age_band_attribute": lambda f: (
        "The protocol has no subgroup read from PatientAge with bands: the age-band mix is not described."
    ),
    # highest-confidence errors
    "no_study_keys": lambda f: "study keys were not passed to the evaluation: no study can be named",
    "study_keys_look_like_uids": lambda f: (
        "the study keys look like DICOM UIDs and are not listed: pseudonymise them first"
    ),
    # methods of the sensitivity analyses; cluster_bootstrap: the document's bootstrap settings
    "top_label_correct": lambda f: (
        "top-label: the predicted class is correct; its probability is the top-label confidence"
    ),
    "logit_slope": lambda f: "logit P(correct) = a + b logit(confidence); the slope is b",
    "logit_offset_intercept": lambda f: (
        "logit P(correct) = alpha + logit(confidence), slope fixed at 1 (offset); the intercept is alpha "
        "(calibration-in-the-large)"
    ),
    "accuracy_over_mean_confidence": lambda f: "observed / expected = accuracy / mean top-label confidence",
    "wald_cluster_robust": lambda f: "Wald, cluster-robust (patient) sandwich standard error",
    "cluster_bootstrap": _cluster_bootstrap,
    "log_oe": lambda f: "log(O/E), O/E = accuracy / mean top-label confidence",
    "cluster_robust_delta_method": lambda f: "cluster-robust (patient) delta-method variance of log(O/E)",
    "reml_hartung_knapp": lambda f: (
        "random effects, tau² by REML, Hartung-Knapp interval (max(1, q) modification, t, k - 1 df), "
        "prediction interval for a "
        "new site (t, k - 2 df); Q tested against chi-squared with k - 1 df"
    ),
    "dersimonian_laird": lambda f: (
        "DerSimonian-Laird random effects; Q tested against chi-squared with k - 1 df"
    ),
    "refit_by_protocol_policy": lambda f: (
        f"{f.get('fitted', 'temperatures')} refitted by the protocol's policy on the remaining fit part"
    ),
}


def word(code: object, fields: Fields | None = None, *, missing: str = NOT_RECORDED) -> str:
    """The words for ``code``, from the fields stored beside it.

    Parameters
    ----------
    code : str or None
        A code of ``evaluation.json`` (checked against its vocabulary when the document was read).
    fields : Mapping, optional
        The numbers and names the words need (see :data:`WORDS`).
    missing : str
        What to print when there is no code.

    Returns
    -------
    str
        Plain text; a code this sitecal does not know is printed as it is.
    """
    if code is None or code == "":
        return missing
    words = WORDS.get(str(code))
    return str(code) if words is None else words(fields or {})


def margin_text(criterion: Fields) -> str:
    """A criterion's margin in words: 'below 0.05', 'above 0.8' or 'within [0.8, 1.25]'."""

    def number(key: str) -> str:
        value = criterion.get(key)
        return f"{value:g}" if isinstance(value, int | float) else NOT_RECORDED

    rule = criterion.get("rule")
    if rule == "below":
        return f"below {number('upper_margin')}"
    if rule == "above":
        return f"above {number('lower_margin')}"
    if rule == "within":
        return f"within [{number('lower_margin')}, {number('upper_margin')}]"
    return NOT_RECORDED


def criterion_text(criterion: Fields) -> str:
    """A criterion in words, from its fields: for criteria whose protocol gives no description."""
    scope = criterion.get("scope")
    where = "overall" if scope in (None, "overall") else f"in every {scope} group"
    text = f"{str(criterion.get('metric')).upper()} {criterion.get('stage')} calibration "
    return text + f"{margin_text(criterion)} {where}"
