"""Methods and fitted temperatures sections: the procedure, worded from the recorded settings."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reportlab.platypus import Flowable, KeepTogether

from sitecal.metrics.registry import ECE, METRICS, SMOOTH_ECE

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
from ._styles import table
from ._text import NOT_RECORDED, format_count, format_value, para_text, short_sha, words

__all__ = ["fitted_temperatures", "methods"]

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
    elif "fold" in method or "cross" in method:
        text = (
            f"Cross-fitting with {para_text(split.get('n_folds'))} folds by patient{strat}, seed {seed}: "
            "each study is evaluated with temperatures fitted on the other folds."
        )
    else:
        text = f"Split method '{para_text(method or NOT_RECORDED)}'{strat}, seed {seed}."
    text += (
        f" Fit split: {format_count(split.get('n_fit'))} studies "
        f"({format_count(split.get('patients_fit'))} patients); evaluation split: "
        f"{format_count(split.get('n_evaluation'))} studies "
        f"({format_count(split.get('patients_evaluation'))} patients). A temperature is never evaluated "
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
        text += (
            f" For {where}, the temperature was refitted on resampled fit-split patients in every resample "
            "(one batched solve), so the intervals after calibration include its uncertainty; other "
            "subgroups hold the fitted temperatures fixed."
        )
    elif refit is False:
        text += (
            " Temperatures were held fixed across resamples: the intervals do not include their uncertainty."
        )
    else:
        text += f" Whether the temperature was refitted in each resample: {NOT_RECORDED}."
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
        "model here and no layer was retrained; only the temperature below is fitted."
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
        + "). The model was run as supplied: no layer was retrained; only the temperature below is fitted."
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
        calibration = f"Method '{para_text(method)}'."
    fallback = cal.get("fallback")
    fallback_text = {
        "global": "the global temperature (fitted on the whole fit split)",
        "shrink": "a temperature shrunk toward the global one",
    }.get(str(fallback), f"the '{para_text(words(fallback))}' fallback")
    minimum = cal.get("min_group_size")
    if minimum is not None and fallback is not None:
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


_GLOBAL = "\0global"  # key of the global temperature's interval (not a possible group name)


def _temperature_intervals(ctx: Context) -> dict[str, Mapping[str, Any]]:
    """Interval of each calibration group's temperature from evaluation.json (global: ``_GLOBAL``)."""
    ev = ctx.evaluation
    per = ctx.calibration.get("per")
    out: dict[str, Mapping[str, Any]] = {}
    for entry in (ev.get("subgroups") or {}).get(per, []) if per else []:
        found = entry.get("temperature_interval")
        if isinstance(found, Mapping):
            out[str(entry.get("group"))] = found
            if entry.get("temperature_source") == "global_fallback":
                out.setdefault(_GLOBAL, found)
    overall = ev.get("global_temperature_interval")
    if isinstance(overall, Mapping):
        out[_GLOBAL] = overall
    return out


def fitted_temperatures(ctx: Context) -> list[Flowable]:
    """Temperature per calibration group with its n, source and fit-split NLL, then the global one."""
    cal = ctx.calibration
    per = ctx.attribute_label(cal["per"])
    sources = {
        "own": "own fit",
        "global_fallback": "global fallback",
        "global": "global fallback",
        "shrunk": "shrunk toward global",
        "shrinkage": "shrunk toward global",
    }

    def nll_pair(entry: Mapping[str, Any]) -> str:
        fit = entry.get("fit") or entry  # a group's own fit, or the global fit itself
        before, after = fit.get("nll_before"), fit.get("nll_after")
        if before is None and after is None:
            return (
                "not fitted (uses global T)"
                if str(entry.get("source", "")).startswith("global")
                else NOT_RECORDED
            )
        return f"{format_value(before)} → {format_value(after)}"

    intervals = _temperature_intervals(ctx)

    def interval_text(name: str) -> str:
        found = intervals.get(name)
        if not found or found.get("low") is None:
            return "—"
        return f"{format_value(found['low'])} – {format_value(found['high'])}"

    rows: list[list[Any]] = [
        [
            ctx.head(per),
            ctx.head("n (fit split)", right=True),
            ctx.head("T", right=True),
            ctx.head(f"{ctx.level_text()} interval of T", right=True),
            ctx.head("Source"),
            ctx.head("NLL on fit split, before → after"),
        ]
    ]
    unconverged = []
    for name, entry in cal["groups"].items():
        source = entry.get("source")
        rows.append(
            [
                ctx.cell(name),
                ctx.cell(format_count(entry.get("n")), style=ctx.styles.cell_num),
                ctx.cell(format_value(entry["temperature"]), style=ctx.styles.cell_num),
                ctx.cell(interval_text(name), style=ctx.styles.cell_num),
                ctx.cell(sources.get(str(source), words(source)) if source else NOT_RECORDED),
                ctx.cell(nll_pair(entry)),
            ]
        )
        if (entry.get("fit") or {}).get("converged") is False:
            unconverged.append(name)
    glob = cal["global_fit"]
    rows.append(
        [
            ctx.p("<b>Global (all fit studies)</b>", ctx.styles.cell),
            ctx.cell(format_count(glob.get("n")), style=ctx.styles.cell_num),
            ctx.p(f"<b>{format_value(glob['temperature'])}</b>", ctx.styles.cell_num),
            ctx.cell(interval_text(_GLOBAL), style=ctx.styles.cell_num),
            ctx.cell("fit on all"),
            ctx.cell(nll_pair(glob)),
        ]
    )
    w = ctx.width
    story: list[Flowable] = [
        ctx.h1("Fitted temperatures"),
        ctx.p(
            f"One temperature per {para_text(per.lower())}, fitted on the fit split "
            f"(calibration.json). The NLL columns are measured on the same fit studies and show how much the "
            "fit improved them; the honest measure is on the evaluation split in the Results section. "
            "The interval of T resamples the patients of the rows it was fitted on (the group's own, or "
            "the whole fit split for the global temperature); a shrunk temperature has none."
        ),
        KeepTogether(
            ctx.table_block(
                f"Temperatures per {para_text(per.lower())}.",
                table(rows, [w * 0.25, w * 0.11, w * 0.09, w * 0.16, w * 0.16, w * 0.23]),
            )
        ),
    ]
    if glob.get("converged") is False:
        unconverged.append("global")
    if unconverged:
        story.append(
            ctx.p(
                "<b>Solver did not reach its tolerance for:</b> "
                + ", ".join(para_text(u) for u in unconverged)
                + "."
            )
        )
    return story
