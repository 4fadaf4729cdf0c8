"""What :func:`~sitecal.arrays.evaluate_arrays` returns: the evaluation, as a table and a run folder."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from sitecal.evaluation import EvaluationOutcome
from sitecal.protocol import Protocol
from sitecal.results import metrics_table

__all__ = ["ArrayEvaluation", "protocol_yaml"]


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

    @classmethod
    def in_array_order(
        cls,
        outcome: EvaluationOutcome,
        order: np.ndarray,
        protocol: Protocol,
        *,
        scores: str,
        patients_given: bool,
    ) -> ArrayEvaluation:
        """The evaluation of rows taken in ``order`` (split-key order), its split back in the arrays'."""
        fold = np.empty_like(outcome.split.fold)
        fold[order] = outcome.split.fold
        outcome = dataclasses.replace(outcome, split=dataclasses.replace(outcome.split, fold=fold))
        return cls(outcome=outcome, protocol=protocol, scores=scores, patients_given=patients_given)

    @property
    def verdict(self) -> str:
        """``pass``, ``fail``, ``inconclusive`` or ``insufficient data`` (``pass`` with no criterion)."""
        return self.outcome.verdict

    @property
    def document(self) -> dict[str, Any]:
        """Every number, as ``evaluation.json`` holds it."""
        return self.outcome.document

    def rows(self) -> list[dict[str, Any]]:
        """One row per group (overall first), metric and stage: the rows of a run's ``metrics.csv``.

        Each row has the columns of :data:`sitecal.results.METRIC_COLUMNS`: ``attribute``, ``group``,
        ``metric``, ``stage`` (before, after, difference), ``estimate``, ``low``, ``high``, ``n`` (the
        group's evaluation studies), ``criterion`` and ``outcome`` (the acceptance criterion judging the
        row and its verdict for the group; ``None`` where none does), as
        :func:`sitecal.results.metrics_table` makes them.
        """
        return [row.to_dict() for row in metrics_table(self.outcome.result)]

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
        from sitecal.run.stages import render_stored

        return render_stored(self.write(folder, title=title))

    def write(self, folder: str | Path, *, title: str | None = None) -> Path:
        """Write the run folder's documents into ``folder``, without the report; returns ``folder``.

        The documents are those of a run: ``evaluation.json``, ``metrics.csv`` (and ``metrics.parquet``
        when pyarrow is installed), ``calibration.json``, ``provenance.json``, ``protocol.yaml`` and
        ``report-context.json``.

        ``evaluation.json`` is written as a run writes it: the same numbers from the same rows give the
        same bytes, but for the protocol's hash and the names of the listed studies (``row i`` here).
        """
        from sitecal import __version__
        from sitecal._io import write_json_atomic, write_text_atomic
        from sitecal.protocol import LoadedProtocol
        from sitecal.provenance import provenance_document
        from sitecal.results import ProvenanceDocument, write_document, write_metrics_table
        from sitecal.run.stages import REPORT_CONTEXT, calibration_document, report_context

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        protocol = self.protocol
        text = protocol_yaml(protocol)
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
        write_metrics_table(folder, self.outcome.result)  # metrics.csv (and .parquet), as a run writes them
        write_document(
            folder / "calibration.json",
            calibration_document(protocol, self.outcome.temperatures.to_dict(), model_sha256=None),
        )
        ProvenanceDocument.from_dict(provenance, source="provenance.json")  # as its schema says
        write_json_atomic(folder / "provenance.json", provenance)
        write_text_atomic(folder / "protocol.yaml", text)
        loaded = LoadedProtocol(protocol=protocol, path=folder / "protocol.yaml", text=text, sha256=sha)
        context = report_context(loaded)
        if title is not None:
            context["title"] = title
        write_json_atomic(folder / REPORT_CONTEXT, context)
        return folder


def protocol_yaml(protocol: Protocol) -> str:
    """The protocol as YAML text (what the report's appendix prints)."""
    import yaml

    return str(yaml.safe_dump(json.loads(protocol.model_dump_json(exclude_none=True)), sort_keys=False))
