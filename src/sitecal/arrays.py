"""The notebook route: arrays in, the same evaluation and report a run gives, out.

:func:`evaluate_arrays` takes a model's scores (logits or probabilities), labels, patient ids and subgroup
columns as arrays, and runs the evaluation of :func:`sitecal.evaluation.evaluate` on them: the seeded
patient-level split, one temperature per group of ``calibrate_by``, every metric before and after with
clustered, paired bootstrap intervals, disparities, acceptance verdicts. What it returns can be shown as a
table (:meth:`ArrayEvaluation.table`, a pandas DataFrame when pandas is installed) and rendered as the
same PDF report a run writes (:meth:`ArrayEvaluation.render`).

Like a run, it pools subgroup values of fewer than ``min_count_shown`` rows as ``other (n < k)``, and
never writes a patient id: patients are only used to keep a patient's studies together.

One answer per data set: the arrays are evaluated exactly as ``sitecal evaluate`` evaluates a predictions
file holding the same rows (the study ids in its key column, the patient ids in ``data.patient_column``,
the group columns, the same settings). Patients and studies are ordered by the split keys of their ids
(:mod:`sitecal._split_key`), as the command line orders them, so both draw the same split or folds and
the same resamples, and write the same numbers and verdict.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from sitecal._split_key import split_key
from sitecal.cohort.attributes import UNKNOWN, attribute_value, suppress_rare_values
from sitecal.cohort.mapping import UNMAPPED
from sitecal.errors import DataError
from sitecal.evaluation import EvaluationData, EvaluationOutcome, evaluate
from sitecal.metrics import log_probabilities
from sitecal.protocol import Protocol

__all__ = ["ArrayEvaluation", "evaluate_arrays"]


@dataclass(frozen=True)
class ArrayEvaluation:
    """The evaluation of arrays, with the protocol it ran under.

    Attributes
    ----------
    outcome : EvaluationOutcome
        The evaluation document (``outcome.document``, as ``evaluation.json``), the fitted temperatures
        and the fit/evaluation split.
    protocol : Protocol
        The protocol the arguments of :func:`evaluate_arrays` make.
    scores : {"logits", "probabilities"}
        What the scores were given as (the report says so).
    patients_given : bool
        Whether patient ids were given (without them each study is its own patient).
    """

    outcome: EvaluationOutcome
    protocol: Protocol
    scores: str = "logits"  # or "probabilities": what the arrays gave
    patients_given: bool = False

    @property
    def verdict(self) -> str:
        """``pass``, ``fail``, ``inconclusive`` or ``insufficient data`` (``pass`` with no criterion)."""
        return self.outcome.verdict

    @property
    def document(self) -> dict[str, Any]:
        """Every number, as ``evaluation.json`` holds it."""
        return self.outcome.document

    def rows(self) -> list[dict[str, Any]]:
        """One row per group (overall first), metric and stage: estimate and interval."""
        doc = self.outcome.document
        groups = [doc["overall"], *[g for groups in doc["subgroups"].values() for g in groups]]
        out = []
        for g in groups:
            for metric, stages in g["metrics"].items():
                for stage in ("before", "after", "difference"):
                    out.append(
                        {
                            "attribute": g["attribute"],
                            "group": g["group"],
                            "n": g["n"],
                            "patients": g["n_patients"],
                            "temperature": g["temperature"],
                            "metric": metric,
                            "stage": stage,
                            **{k: stages[stage][k] for k in ("estimate", "low", "high")},
                        }
                    )
        return out

    def table(self) -> Any:
        """:meth:`rows` as a pandas DataFrame (or the list of rows when pandas is not installed)."""
        try:
            import pandas as pd
        except ImportError:
            return self.rows()
        return pd.DataFrame(self.rows())

    def render(self, folder: str | Path, *, title: str | None = None) -> Path:
        """Write the run folder's documents into ``folder`` and render ``report.pdf`` (+ ``report.dcm``).

        The report is the one a run writes, drawn from the same stored documents (:meth:`write`); its
        provenance says the model was not run by sitecal (its scores were given as arrays).
        """
        from sitecal.stages import render_stored

        return render_stored(self.write(folder, title=title))

    def write(self, folder: str | Path, *, title: str | None = None) -> Path:
        """Write the run folder's documents into ``folder``, without the report; returns ``folder``.

        ``evaluation.json`` is written as a run writes it: the same numbers from the same rows give the
        same bytes, but for the protocol's hash and the names of the listed studies (``row i`` here).
        """
        from sitecal import __version__
        from sitecal._io import write_json_atomic, write_text_atomic
        from sitecal.protocol import LoadedProtocol
        from sitecal.provenance import provenance_document
        from sitecal.results import write_document
        from sitecal.stages import REPORT_CONTEXT, calibration_document, report_context

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        protocol = self.protocol
        text = _protocol_yaml(protocol)
        sha = hashlib.sha256(text.encode()).hexdigest()
        created = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        provenance = provenance_document(
            sitecal_version=__version__,
            created_utc=created,
            command_line="sitecal.evaluate_arrays(...)",
            run_folder=folder.name,
            seeds={"split": protocol.calibration.split.seed, "bootstrap": protocol.evaluation.bootstrap.seed},
            sha256={"protocol": sha},
            model={"name": protocol.model.name},
            transforms_sha256=None,
            device=None,
            pseudonym_key="",
        )
        n = int(self.outcome.document["cohort_flow"]["analysed"])
        provenance["predictions_file"] = {
            "model_run_here": False,
            "source": "arrays",
            "rows": n,
            "usable_rows": n,
            "scores": self.scores,
            "key": "row of the arrays",
            "patients": "column" if self.patients_given else "one per study",
            "labels": "arrays",
            "subgroups_from": ["arrays"] if protocol.subgroups else [],
            "dicom_joined": False,
        }
        write_document(folder / "evaluation.json", self.outcome.result)
        write_document(
            folder / "calibration.json",
            calibration_document(protocol, self.outcome.temperatures.to_dict(), model_sha256=None),
        )
        write_json_atomic(folder / "provenance.json", provenance)
        write_text_atomic(folder / "protocol.yaml", text)
        loaded = LoadedProtocol(protocol=protocol, path=folder / "protocol.yaml", text=text, sha256=sha)
        context = report_context(loaded)
        if title is not None:
            context["title"] = title
        write_json_atomic(folder / REPORT_CONTEXT, context)
        return folder


def evaluate_arrays(
    *,
    labels: ArrayLike,
    class_names: Sequence[str],
    logits: ArrayLike | None = None,
    probabilities: ArrayLike | None = None,
    patients: ArrayLike | None = None,
    studies: ArrayLike | None = None,
    key: str = "StudyInstanceUID",
    groups: Mapping[str, ArrayLike] | None = None,
    calibrate_by: str | None = None,
    acceptance: Sequence[Mapping[str, Any]] = (),
    n_resamples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    split_seed: int = 0,
    fit_fraction: float = 0.5,
    folds: int | None = None,
    fallback: str = "global",
    calibration_min_group_size: int = 50,
    refit: bool = False,
    n_bins: int = 15,
    min_group_size: int = 30,
    min_count_shown: int = 5,
    name: str = "notebook",
    intended_use: str = "Exploratory calibration analysis from a notebook.",
    progress: bool = False,
) -> ArrayEvaluation:
    """Evaluate a model's calibration per subgroup from arrays, as a run does from DICOM.

    The arrays give the ``evaluation.json`` that ``sitecal evaluate`` gives for a predictions file of the
    same rows under the same settings (the file's keys in ``studies``, its patient column in
    ``patients``), byte for byte but for the protocol's hash and the names of the listed studies: the
    same split or folds, resamples, numbers and verdict. Patients and studies are ordered by the split
    keys of their ids (:mod:`sitecal._split_key`), so the order of the arrays changes no number.

    Parameters
    ----------
    labels : array_like of int, shape (N,)
        Class index of each study.
    class_names : sequence of str
        The model's classes, in score order.
    logits, probabilities : array_like, shape (N, C)
        The model's scores: give exactly one. Probabilities are temperature-scaled on their logarithms
        (:func:`sitecal.metrics.log_probabilities`).
    patients : array_like, shape (N,), optional
        Patient of each study: a patient's studies stay together in the split and the bootstrap.
        Default: each study is its own patient (the intervals then assume independent studies). Ids are
        trimmed as a file's cells are; an empty id makes the study its own patient.
    studies : array_like, shape (N,), optional
        Each study's id, as a predictions file's key column would hold it (what ``key`` says): ids order
        a patient's studies (and patients given none), so the numbers equal those of ``sitecal evaluate``
        on a file of these rows. Never written; the document names studies by their row, ``row i``.
        Default: the row numbers ``0`` to ``N - 1``.
    key : {"StudyInstanceUID", "AccessionNumber"}
        What ``studies`` holds (a protocol's ``data.key``).
    groups : mapping of str to array_like, optional
        Subgroup columns, e.g. ``{"site": sites, "scanner": scanners}``; names in lower case.
    calibrate_by : str, optional
        The group column that gets one temperature per value; default: one global temperature.
    acceptance : sequence of mapping
        Acceptance criteria as a protocol writes them, e.g.
        ``{"id": "ece", "metric": "ece", "below": 0.05, "scope": "site"}``.
    n_resamples, level, seed : int, float, int
        Bootstrap settings (percentile intervals, patient-clustered, paired before/after).
    split_seed, fit_fraction : int, float
        The seeded patient-level split: temperatures are fitted on ``fit_fraction`` of the patients and
        every metric is measured on the others.
    folds : int, optional
        Cross-fit instead (a protocol's ``split: {by: crossfit, folds: K}``, 2 to 20): each of ``folds``
        patient folds is evaluated with temperatures fitted on the others; ``fit_fraction`` is then not
        used.
    fallback : {"global", "shrink", "empirical_bayes"}
        What a calibration group with few fit studies gets (a protocol's ``calibration.fallback``):
        ``empirical_bayes`` shrinks every group's log temperature toward their mean, by how much the
        groups really differ.
    calibration_min_group_size : int
        Fewest fit studies a calibration group needs for its own temperature (a protocol's
        ``calibration.min_group_size``, with its default); a smaller group gets ``fallback``.
    refit : bool
        Refit the temperatures in every bootstrap resample (a protocol's ``bootstrap.refit``), so the
        after-calibration intervals include their uncertainty.
    n_bins, min_group_size, min_count_shown : int
        ECE bins; smallest group judged; smallest group shown by its own value.

    Returns
    -------
    ArrayEvaluation

    Raises
    ------
    DataError
        When the arrays disagree in length, scores are not finite, labels are out of range, or an
        argument makes an invalid protocol (the message names the argument).

    Examples
    --------
    >>> import numpy as np
    >>> from sitecal import evaluate_arrays
    >>> rng = np.random.default_rng(0)
    >>> n = 400
    >>> site = np.where(np.arange(n) % 2 == 0, "north", "south")
    >>> logits = rng.normal(size=(n, 2)) * np.where(site == "north", 3.0, 1.0)[:, None]
    >>> labels = (rng.random(n) < 1 / (1 + np.exp(logits[:, 0] - logits[:, 1]))).astype(int)
    >>> result = evaluate_arrays(logits=logits, labels=labels, class_names=["no", "yes"],
    ...                          groups={"site": site}, calibrate_by="site", n_resamples=200)
    >>> sorted({row["group"] for row in result.rows()})
    ['All studies', 'north', 'south']
    """
    scores = _scores(logits, probabilities)
    y = np.asarray(labels)
    n = len(y)
    if scores.ndim != 2 or scores.shape != (n, len(class_names)):
        raise DataError(
            f"scores of shape {scores.shape} for {n} labels and {len(class_names)} class names: give one row "
            "per label and one column per class."
        )
    if not np.all(np.isfinite(scores)):
        raise DataError("scores hold NaN or infinity: every score must be a finite number.")
    if y.dtype.kind not in "iu" or (n and (y.min() < 0 or y.max() >= len(class_names))):
        raise DataError(f"labels must be class indices 0..{len(class_names) - 1}.")
    columns = {name: np.asarray(value).astype(str) for name, value in (groups or {}).items()}
    for column, value in columns.items():
        if value.shape != (n,):
            raise DataError(f"groups['{column}'] has shape {value.shape}; give one value per label ({n}).")
    order, patient_keys = _row_order(patients, studies, n, key=key)
    if calibrate_by is not None and calibrate_by not in columns:
        raise DataError(
            f"calibrate_by={calibrate_by!r} is not one of groups ({', '.join(columns) or 'none given'}): "
            "give it as a column of groups=, or leave calibrate_by out for one global temperature."
        )
    protocol = _protocol(
        class_names=class_names,
        groups=list(columns),
        key=key,
        calibrate_by=calibrate_by,
        acceptance=acceptance,
        n_resamples=n_resamples,
        level=level,
        seed=seed,
        split_seed=split_seed,
        fit_fraction=fit_fraction,
        folds=folds,
        fallback=fallback,
        calibration_min_group_size=calibration_min_group_size,
        refit=refit,
        n_bins=n_bins,
        min_group_size=min_group_size,
        min_count_shown=min_count_shown,
        name=name,
        intended_use=intended_use,
    )
    # a predictions file's column values: normalised as a column subgroup's, rare ones pooled
    rows = [{k: attribute_value(k, {k: str(v[i])}) for k, v in columns.items()} for i in range(n)]
    shown = suppress_rare_values(rows, min_count_shown, keep=(UNKNOWN, UNMAPPED))
    data = EvaluationData(
        logits=scores[order],
        labels=y.astype(np.int64)[order],
        # in memory only: the split keys order the split and the resamples, as the command line's do
        patient_keys=patient_keys[order],
        study_keys=np.array([f"row {i}" for i in order.tolist()]),
        attributes={k: np.array([shown[i][k] for i in order.tolist()], dtype=object) for k in columns},
        class_names=list(class_names),
    )
    flow = {
        "files_found": 0,
        "dicom_instances": 0,
        "studies": n,
        "labelled": n,
        "analysed": n,
        "exclusions": [],
        "source": "predictions_file",
    }
    protocol_sha = hashlib.sha256(_protocol_yaml(protocol).encode()).hexdigest()
    outcome = evaluate(protocol, data, cohort_flow=flow, protocol_sha256=protocol_sha, progress=progress)
    # the split back in the order of the arrays (the evaluation ran in split-key order)
    fold = np.empty_like(outcome.split.fold)
    fold[order] = outcome.split.fold
    outcome = dataclasses.replace(outcome, split=dataclasses.replace(outcome.split, fold=fold))
    return ArrayEvaluation(
        outcome=outcome,
        protocol=protocol,
        scores="logits" if logits is not None else "probabilities",
        patients_given=patients is not None,
    )


def _row_order(
    patients: ArrayLike | None, studies: ArrayLike | None, n: int, *, key: str
) -> tuple[np.ndarray, np.ndarray]:
    """The rows in the command line's order, and each row's patient split key (:mod:`sitecal._split_key`).

    As ``sitecal evaluate`` reads a predictions file: a study's order is the split key of its id (of
    kind ``study`` for a StudyInstanceUID, else the key's name); a patient's, the split key of their id,
    or their study's for a study without a patient; rows are sorted by (patient, study). Returns the
    permutation, shape (N,), and the split keys in the arrays' order, shape (N,).
    """
    if key not in ("StudyInstanceUID", "AccessionNumber"):
        raise DataError(
            "The 'key' parameter of evaluate_arrays must be 'StudyInstanceUID' or 'AccessionNumber'. "
            f"Got {key!r}."
        )
    study_ids = [str(i) for i in range(n)] if studies is None else _ids(studies, n, "studies")
    if any(not s for s in study_ids) or len(set(study_ids)) != n:
        raise DataError(
            "studies must hold a distinct, non-empty id per label (a predictions file's key column); "
            "leave it out to order studies by their row."
        )
    kind = "study" if key == "StudyInstanceUID" else key
    study_orders = [split_key(kind, s) for s in study_ids]
    patient_ids = [""] * n if patients is None else _ids(patients, n, "patients")
    patient_orders = [
        split_key("patient", p) if p else study for p, study in zip(patient_ids, study_orders, strict=True)
    ]
    order = sorted(range(n), key=lambda i: (patient_orders[i], study_orders[i]))
    return np.array(order, dtype=np.int64), np.array(patient_orders)


def _ids(values: ArrayLike, n: int, name: str) -> list[str]:
    """Ids as a file's trimmed cells, one per label."""
    ids = np.asarray(values).astype(str)
    if ids.shape != (n,):
        raise DataError(f"{name} has shape {ids.shape}; give one id per label ({n}).")
    return [s.strip() for s in ids.tolist()]


def _scores(logits: ArrayLike | None, probabilities: ArrayLike | None) -> np.ndarray:
    if (logits is None) == (probabilities is None):
        raise DataError("give exactly one of logits= or probabilities=.")
    if logits is not None:
        return np.asarray(logits, dtype=np.float64)
    p = np.asarray(probabilities, dtype=np.float64)
    if p.ndim == 2 and (np.any(p < 0) or np.any(p > 1) or np.any(np.abs(p.sum(axis=1) - 1) > 1e-3)):
        raise DataError("probabilities must lie in [0, 1] and each row must sum to 1 (within 0.001).")
    return log_probabilities(p)


def _protocol(
    *,
    class_names: Sequence[str],
    groups: list[str],
    key: str,
    calibrate_by: str | None,
    acceptance: Sequence[Mapping[str, Any]],
    n_resamples: int,
    level: float,
    seed: int,
    split_seed: int,
    fit_fraction: float,
    folds: int | None,
    fallback: str,
    calibration_min_group_size: int,
    refit: bool,
    n_bins: int,
    min_group_size: int,
    min_count_shown: int,
    name: str,
    intended_use: str,
) -> Protocol:
    from pydantic import ValidationError

    document = {
        "name": name,
        "intended_use": intended_use,
        "model": {"name": "model given as arrays", "class_names": list(class_names)},
        "data": {"predictions": "arrays", "key": key},
        "subgroups": {key: {"column": key} for key in groups},
        "calibration": {
            "per": calibrate_by,
            "min_group_size": calibration_min_group_size,
            "fallback": fallback,
            "split": (
                {"by": "patient", "seed": split_seed, "fit_fraction": fit_fraction}
                if folds is None
                else {"by": "crossfit", "seed": split_seed, "folds": folds}
            ),
        },
        "evaluation": {
            "n_bins": n_bins,
            "min_group_size": min_group_size,
            "bootstrap": {"n_resamples": n_resamples, "level": level, "seed": seed, "refit": refit},
        },
        "acceptance": [dict(c) for c in acceptance],
        "privacy": {"min_count_shown": min_count_shown},
    }
    try:
        return Protocol.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "arguments"
        message = str(first["msg"]).removeprefix("Value error, ")
        raise DataError(f"evaluate_arrays: {where}: {message}") from None


def _protocol_yaml(protocol: Protocol) -> str:
    """The protocol as YAML text (what the report's appendix prints)."""
    import yaml

    return str(yaml.safe_dump(json.loads(protocol.model_dump_json(exclude_none=True)), sort_keys=False))
