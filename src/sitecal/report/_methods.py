"""Methods section: the procedure, worded from the recorded settings."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from reportlab.platypus import Flowable

from sitecal.metrics.registry import ECE, METRICS, SMOOTH_ECE

from ._comparison import METHOD_LABELS, METHOD_TEXT
from ._context import Context
from ._inputs import get
from ._model_outputs import (
    calibration_text,
    labels_text,
    patients_text,
    predictions_record,
    read_from_file_text,
    rows_text,
    subgroups_text,
    weights_text,
)
from ._sections import key_values
from ._text import NOT_RECORDED, format_count, format_value, para_text, short_sha, words

__all__ = ["methods"]

#: "<label>: <description>" of each metric for the Methods section; ECE has the row above to itself.
_DEFINITIONS = {m.name: f"{m.label}: {m.description}" for m in METRICS} | {
    ECE.name: f"{ECE.label} (see above)"
}


def _split_text(ctx: Context) -> str:
    split = get(ctx.evaluation, "split")
    if not isinstance(split, Mapping):
        return f"Split: {NOT_RECORDED}."
    method = str(split.get("method") or "")
    seed = para_text(split.get("seed"))
    stratify = split.get("stratify")
    strat = f", stratified by {para_text(ctx.attribute_label(stratify).lower())}" if stratify else ""
    fraction = split.get("fit_fraction")
    if method == "patient":
        share = f"{fraction:.0%}" if isinstance(fraction, int | float) else NOT_RECORDED
        text = (
            f"Patient-level split: {share} of patients to the fit split and the rest to the evaluation "
            f"split{strat}, seed {seed}. All studies of one patient are on the same side."
        )
    elif method == "crossfit":
        return (
            f"Cross-fitting by patient with {para_text(split.get('folds'))} folds{strat}, seed {seed}: "
            "patients are dealt to the folds, and each fold is evaluated with temperatures fitted on the "
            "other folds, so every study is evaluated once and never with a temperature fitted on it "
            f"({format_count(split.get('n_evaluation'))} studies, "
            f"{format_count(split.get('patients_evaluation'))} patients; all studies of one patient in one "
            "fold). The temperatures reported and deployed are fitted on every study; the Results measure "
            "the procedure that made them. Cross-fitting evaluates twice as many studies as a half split "
            "and does not hang the verdict on one draw of patients."
        )
    else:
        text = f"Split method '{para_text(method or NOT_RECORDED)}'{strat}, seed {seed}."
    text += (
        f" Fit split: {format_count(split.get('n_fit'))} studies "
        f"({format_count(split.get('patients_fit'))} patients); evaluation split: "
        f"{format_count(split.get('n_evaluation'))} studies "
        f"({format_count(split.get('patients_evaluation'))} patients). The calibration is never evaluated "
        "on the studies it was fitted on; every metric in the Results section is measured on the "
        "evaluation split."
    )
    return text


def _ece_text(ctx: Context) -> str:
    ece = get(ctx.evaluation, ECE.name)
    if not isinstance(ece, Mapping):
        return f"ECE definition: {NOT_RECORDED}."
    kind = para_text(ece.get("kind"))
    binning = {"width": "equal-width", "mass": "equal-mass (adaptive)"}.get(
        str(ece.get("binning")), para_text(ece.get("binning"))
    )
    edges = para_text(ece.get("edges"))
    confidence = (
        "the top-label confidence (the largest predicted probability)"
        if ece.get("kind") == "top-label"
        else "the predicted probability"
    )
    return (
        f"Expected calibration error, {kind}: {confidence} is sorted into "
        f"{para_text(ece.get('n_bins'))} {binning} bins on [0, 1], each bin an interval {edges}; "
        "ECE = Σ<sub>b</sub> (n<sub>b</sub>/n) · |acc(b) − conf(b)|, the absolute gap between accuracy and "
        "mean confidence in each bin, weighted by the bin's share of studies. 0 is perfect; binned ECE is "
        "biased upward in small groups."
    )


def _bootstrap_text(ctx: Context) -> str:
    boot = get(ctx.evaluation, "bootstrap")
    if not isinstance(boot, Mapping):
        return f"Intervals: {NOT_RECORDED}."
    cluster = boot.get("cluster")
    strata = boot.get("strata")
    unit = f"{para_text(words(cluster))}s" if cluster else "studies"
    text = (
        f"{format_count(boot.get('n_resamples'))} bootstrap resamples of {unit}"
        + (f", stratified by {para_text(ctx.attribute_label(strata).lower())}" if strata else "")
        + f"; {ctx.level_text()} {para_text(boot.get('method'))} intervals; "
        + f"seed {para_text(boot.get('seed'))}."
        " Resampling patients keeps a patient's studies together, as they are not independent. The change "
        "after − before has its own paired interval."
    )
    refit = boot.get("refit")
    if refit is True:
        scope = boot.get("refit_scope")
        where = (
            f"each {para_text(ctx.attribute_label(scope).lower())} group"
            if scope and scope != "overall"
            else "the overall figures"
        )
        deployed = ctx.calibration.get("method", "temperature")
        what = (
            "temperature"
            if deployed == "temperature"
            else f"{METHOD_LABELS.get(str(deployed), deployed).lower()} fit"
        )
        text += (
            f" For {where}, the {para_text(what)} was refitted on resampled fit-split patients in every "
            "resample, so the intervals after calibration include its uncertainty; other subgroups hold the "
            "fitted calibration fixed."
        )
    elif refit is False:
        text += (
            " Temperatures were held fixed across resamples: the intervals do not include their uncertainty."
        )
    else:
        text += f" Whether the temperature was refitted in each resample: {NOT_RECORDED}."
    if ctx.calibration.get("fallback") == "empirical_bayes" and ctx.calibration.get("tau2") is not None:
        text += (
            " The empirical-Bayes temperatures' intervals repeat the whole shrinkage in every resample: "
            "patients are resampled within each group's fit split, every group's own fit and its variance "
            "are recomputed, μ and τ² re-estimated by REML and every temperature shrunk again, so the "
            "interval of T includes the uncertainty of the shrinkage itself"
            + (
                "; the after-calibration intervals of each calibration group pair the b-th shrunk "
                "temperature with the b-th resample of its evaluation studies."
                if refit is True
                else "."
            )
            + " Such an interval measures the spread of the shrunk estimate, not the bias that shrinkage "
            "puts on a group unlike the others: in sitecal's coverage study "
            "(benchmarks/coverage_temperature.md) it covered the true temperature of a group of 40 studies "
            "in 84-89 % of draws at a nominal 95 %, and as stated from about 400 studies."
        )
    if ECE.name in (get(ctx.evaluation, "metrics") or []) and boot.get("method") == "percentile":
        text += (
            " Binned ECE is biased upward, and more so in small groups: its resampled values sit above the "
            "estimate, so a percentile interval of ECE can lie wholly above a group's own estimate. That is "
            "the bias made visible, not an error; for a calibrated model such intervals do not cover the "
            "true ECE of 0 (sitecal's coverage study, benchmarks/coverage_ece.md)."
        )
    if SMOOTH_ECE.name in (get(ctx.evaluation, "metrics") or []):
        text += (
            f" {para_text(ctx.metric_name(SMOOTH_ECE.name))}: its kernel width is found again in every "
            "resample (the fixed point of the resampled studies), from their residuals binned on the "
            "2,001-point grid of the direct computation and smoothed by FFT (within 0.00001 of the direct "
            "computation). It is biased upward in small groups, as binned ECE is, so its percentile interval "
            "does not cover a calibrated model's true value of 0 (benchmarks/coverage_smooth_ece.md). It is "
            "not compared between groups: the group comparisons are computed from per-patient sums, which "
            "it is not."
        )
    return text


def _model_from_file_text(ctx: Context, record: Mapping[str, Any]) -> str:
    """The model not run here: name, version, where its outputs came from, its file's fingerprint."""
    model = get(ctx.provenance, "model") or {}
    text = para_text(model.get("name"))
    if model.get("version"):
        text += f", version {para_text(model['version'])}"
    text += f". {read_from_file_text(record, ctx.provenance)} {rows_text(record)}"
    if record.get("dicom_joined"):
        text += " Its rows are joined to the studies of the DICOM folder."
    classes = get(ctx.evaluation, "class_names")
    if classes:
        text += f" Output classes, in score order: {para_text(', '.join(map(str, classes)))}."
    return text + (
        f" Model sha256: {para_text(weights_text(ctx.provenance))}. No image was passed through the "
        f"model here and no layer was retrained; only the {ctx.fitted()} below is fitted."
    )


def _model_text(ctx: Context) -> str:
    """The model as run: name, version, format and file, fingerprint, classes, input preparation."""
    model = get(ctx.provenance, "model") or {}
    text = para_text(model.get("name"))
    if model.get("version"):
        text += f", version {para_text(model['version'])}"
    if model.get("format") or model.get("file"):
        text += f"; {para_text(model.get('format'))} file {para_text(model.get('file'))}"
    text += f", sha256 {para_text(short_sha(get(ctx.provenance, 'sha256', 'model')))}"
    classes = get(ctx.evaluation, "class_names")
    if classes:
        text += f". Output classes, in logit order: {para_text(', '.join(map(str, classes)))}"
    transforms = get(ctx.provenance, "transforms_sha256")
    text += (
        ". Each image is prepared by the MONAI transforms the protocol lists (appendix"
        + (f"; fingerprint {para_text(short_sha(transforms))}" if transforms else "")
        + "). The model was run as supplied: no layer was retrained; only the "
        + f"{ctx.fitted()} below is fitted."
    )
    parts = get(ctx.provenance, "network_parts")
    if isinstance(parts, dict):
        text += (
            f" It was run at the network's sites, each on its own studies (sitecal predict under the "
            f"network's key), and its logits were read here from the {format_count(parts.get('parts'))} "
            "sites' predictions parts, whose sha256 are listed with the fingerprints below."
        )
    return text


def methods(ctx: Context) -> list[Flowable]:
    """Calibration, grouping, split, metric definitions, intervals and the small-group rule."""
    cal, ev = ctx.calibration, ctx.evaluation
    per = ctx.attribute_label(cal["per"]).lower()
    method = str(cal["method"])
    record = predictions_record(ctx.provenance)
    if method == "temperature" and record is not None:
        calibration = calibration_text(record)
    elif method == "temperature":
        calibration = (
            "Temperature scaling (Guo et al., 2017): the model's logits are divided by a temperature "
            "T &gt; 0 chosen to minimise the negative log-likelihood on the fit split. T &gt; 1 softens "
            "over-confident probabilities, T &lt; 1 sharpens them; the predicted class is unchanged."
        )
    else:
        calibration = para_text(METHOD_TEXT.get(method, f"Method '{method}'."))
        if record is not None:
            calibration += (
                " It acts on the scores of the predictions file (probabilities as their logarithms)."
            )
    fallback = cal.get("fallback")
    fallback_text = {
        "global": "the global temperature (fitted on the whole fit split)",
        "shrink": "a temperature shrunk toward the global one",
    }.get(str(fallback), f"the '{para_text(words(fallback))}' fallback")
    minimum = cal.get("min_group_size")
    if fallback == "empirical_bayes":
        rule = _empirical_bayes_text(cal, per)
    elif minimum is not None and fallback is not None:
        rule = (
            f"A group with at least {para_text(minimum)} studies in the fit split gets its own fit; a "
            f"smaller group uses {fallback_text}."
        )
    else:
        rule = (
            f"Minimum fit-split size for an own fit: {para_text(minimum)}; fallback for smaller groups: "
            f"{para_text(None if fallback is None else fallback_text)}."
        )
    grouping = (
        f"One temperature per {para_text(per)}. {rule} A {para_text(per)} not seen at fitting time "
        "receives the global temperature at deployment."
    )
    if method != "temperature":
        minimum = (cal.get("fits") or {}).get("min_group_size")
        grouping = (
            f"One {para_text(METHOD_LABELS.get(method, method).lower())} fit per {para_text(per)}. A group "
            f"with at least {para_text(minimum)} studies in the fit split gets its own fit; a smaller group, "
            f"and a {para_text(per)} not seen at fitting time, uses the global fit (on the whole fit split)."
        )
    metrics = "; ".join(para_text(_DEFINITIONS.get(str(m), ctx.metric_name(m))) for m in ev["metrics"])
    minimum = ctx.min_group_size()
    small = (
        f"Every number carries its n. A group with fewer than {para_text(minimum)} studies in the "
        f"evaluation split is flagged <i>n &lt; {para_text(minimum)}: interpret with caution</i> and "
        "shown, not hidden; an acceptance criterion reports <i>insufficient data</i> where the evaluation "
        "did not judge such a group."
        if minimum is not None
        else f"Minimum group size: {NOT_RECORDED}."
    )
    rows = [("Model", ctx.p(_model_text(ctx), ctx.styles.cell))]
    if record is not None:
        rows = [("Model", ctx.p(_model_from_file_text(ctx, record), ctx.styles.cell))]
        who = [patients_text(record), labels_text(record), subgroups_text(record)]
        rows.append(("Patients and labels", ctx.p(" ".join(w for w in who if w), ctx.styles.cell)))
    selection = ctx.protocol.get("image_selection")
    if selection and (record is None or record.get("dicom_joined")):
        rows.append(("Images analysed", ctx.p(para_text(selection), ctx.styles.cell)))
    rows += [
        ("Calibration", ctx.p(calibration, ctx.styles.cell)),
        ("Calibration groups", ctx.p(grouping, ctx.styles.cell)),
        ("Fit / evaluation split", ctx.p(_split_text(ctx), ctx.styles.cell)),
        ("Calibration error", ctx.p(_ece_text(ctx), ctx.styles.cell)),
        ("Other metrics", ctx.p(metrics + ".", ctx.styles.cell)),
        ("Confidence intervals", ctx.p(_bootstrap_text(ctx), ctx.styles.cell)),
        ("Small groups", ctx.p(small, ctx.styles.cell)),
        ("Acceptance", ctx.p(_acceptance_text(ctx), ctx.styles.cell)),
    ]
    return [ctx.h1("Methods"), key_values(ctx, rows, label_width=0.22)]


def _empirical_bayes_text(cal: Mapping[str, Any], per: str) -> str:
    """What the empirical-Bayes policy did, with its REML estimates, and why."""
    unit = para_text(per)
    text = (
        f"Empirical Bayes (Efron &amp; Morris, 1975): every {unit}, whatever its size, gets its own fit "
        "of log T and that estimate's variance v<sub>g</sub> (patient-cluster-robust: the sum over patients "
        "of the squared score over the squared curvature of the NLL, because a patient's studies are not "
        f"independent). The mean μ and the between-{unit} variance τ² of log T are estimated from all "
        f"{unit}s by restricted maximum likelihood (REML), and each {unit}'s log T is moved toward μ: "
        "log T<sub>g</sub> = μ + w<sub>g</sub> (own log T<sub>g</sub> − μ), with weight "
        "w<sub>g</sub> = τ² / (τ² + v<sub>g</sub>). "
    )
    mu, tau2 = cal.get("mean_log_temperature"), cal.get("tau2")
    if isinstance(mu, int | float) and isinstance(tau2, int | float):
        text += (
            f"Here exp(μ) = {format_value(math.exp(mu))} and τ² = {format_value(tau2)} "
            f"(a between-{unit} standard deviation of log T of {format_value(math.sqrt(tau2))}). "
        )
    else:
        text += f"Fewer than two {unit}s could be pooled, so every {unit} uses the global temperature. "
    return text + (
        f"A {unit} with precise data keeps nearly its own temperature and a small one moves toward exp(μ); "
        "the weight changes continuously with size, so the protocol's minimum group size is not used. A "
        "fit on a bound of T, with no curvature or from a single patient gets weight 0. Why: a size "
        "threshold makes a group's temperature jump when one study crosses it, and a fixed pull toward "
        f"the global temperature does not learn from the data how much the {unit}s really differ. "
        f"Each {unit}'s temperature interval includes the spread of the pull toward exp(μ); in "
        "simulations it contained a group's true temperature in 93–96 % of cases for groups of 200–300 "
        "studies and 89–96 % for groups of 30–120 studies whose temperatures differ."
    )


def _acceptance_text(ctx: Context) -> str:
    """How a criterion is judged, which bound is one-sided at what level, and what "every group" costs."""
    text = (
        "The criteria were fixed in the protocol before the run and are judged by the evaluation stage; "
        "this report prints the recorded verdicts. Each group is judged on its whole interval: <i>pass</i> "
        "when it clears the margin, <i>fail</i> when it lies wholly beyond it, <i>inconclusive</i> when it "
        "straddles the margin (the data show neither)."
    )
    level = ctx.level()
    if level is None:
        return text
    one_sided = (1 + level) / 2
    text += (
        f" Each end of a two-sided {level * 100:g}% interval is a one-sided {one_sided * 100:g}% bound: "
        f"where the interval covers as stated, a group whose true value lies exactly on the margin fails "
        f"with chance {(1 - one_sided) * 100:.3g}%, and passes with the same chance."
    )
    counts = [
        len(c.get("results") or [])
        for c in ctx.evaluation.get("acceptance") or []
        if c.get("scope") not in (None, "overall")
    ]
    k = max(counts, default=0)
    if k > 1:
        text += (
            f" A criterion on every group of a subgroup judges each group separately, with no adjustment: "
            f"with {k} groups all exactly on the margin, the chance that at least one fails is up to "
            f"1 − {one_sided:g}<super>{k}</super> = {(1 - one_sided**k) * 100:.0f}% (it grows with the "
            "number of groups; groups well inside the margin fail far less often)."
        )
    return text
