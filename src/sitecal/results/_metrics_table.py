"""``metrics.csv`` and ``metrics.parquet``: every group's metrics of ``evaluation.json`` as one tidy table.

One row per group (``overall`` first, then each reported attribute's groups, attributes by name),
metric (in the document's ``metrics`` order) and stage (``before``, ``after``, ``difference``): the
estimate and interval exactly as ``evaluation.json`` holds them, the group's evaluation studies, and the
acceptance criterion that judges the row with its verdict for the group. A hospital's tools (a
spreadsheet, a dashboard, a quality register) read it without parsing the nested document.

:class:`MetricRow` is the table's one description: its fields are the columns, in order, and its JSON
Schema (:func:`~sitecal.results.json_schema`) describes one row.

>>> from sitecal.results import METRIC_COLUMNS
>>> METRIC_COLUMNS
('attribute', 'group', 'metric', 'stage', 'estimate', 'low', 'high', 'n', 'criterion', 'outcome')
"""

from __future__ import annotations

import dataclasses
import io
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from sitecal._io import write_bytes_atomic, write_csv_atomic
from sitecal.results._codec import Record
from sitecal.results._evaluation import Criterion, Evaluation
from sitecal.results._fields import Constraint
from sitecal.results._groups import GroupResult
from sitecal.results._kinds import Count

__all__ = ["METRIC_COLUMNS", "MetricRow", "metrics_table", "write_metrics_table"]

logger = logging.getLogger(__name__)

#: Where several criteria judge the same row, their ids and verdicts are joined by this, in protocol
#: order (a criterion id never holds it).
SEPARATOR = ";"
_ID = r"[A-Za-z0-9][A-Za-z0-9_.-]*"
_VERDICT = "pass|fail|inconclusive|insufficient data"
#: A row's stage: before or after calibration, or the paired change after - before.
MetricStage = Literal["before", "after", "difference"]


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricRow(Record):
    """One row of ``metrics.csv``: a group's metric at one stage, and the criterion judging it.

    Attributes
    ----------
    attribute : str
        The subgroup attribute, or 'overall'.
    group : str
        The group's value ('All studies' for the overall row).
    metric : str
        The metric (one of the document's 'metrics').
    stage : {"before", "after", "difference"}
        Before calibration, after calibration, or the paired change after - before.
    estimate, low, high : float
        The estimate on the evaluation studies and its bootstrap interval, as evaluation.json holds them.
    n : int
        The group's evaluation studies.
    criterion : str or None
        The id of the acceptance criterion judging this group's metric at this stage; several ids joined
        by ';' (protocol order) where several do; null (an empty CSV cell) where none does.
    outcome : str or None
        That criterion's verdict for the group ('pass', 'fail', 'inconclusive' or 'insufficient data'),
        joined by ';' in the order of ``criterion``; null where no criterion judges the row.
    """

    attribute: str
    group: str
    metric: str
    stage: MetricStage
    estimate: float
    low: float
    high: float
    n: Count
    criterion: Annotated[str, Constraint(pattern=f"^{_ID}(;{_ID})*$")] | None
    outcome: Annotated[str, Constraint(pattern=f"^({_VERDICT})(;({_VERDICT}))*$")] | None


#: The table's columns, in order: the fields of :class:`MetricRow`.
METRIC_COLUMNS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(MetricRow))
_STAGES: tuple[MetricStage, ...] = ("before", "after", "difference")


def metrics_table(evaluation: Evaluation) -> tuple[MetricRow, ...]:
    """The tidy table of an evaluation: one row per (group, metric, stage) of its group results.

    Parameters
    ----------
    evaluation : Evaluation
        What ``evaluation.json`` holds.

    Returns
    -------
    tuple of MetricRow
        ``overall`` first, then each reported attribute's groups (attributes by name, as evaluation.json
        lists them; groups in the document's order); within a group
        the document's metrics in order, each ``before``, ``after``, ``difference``. Criteria on measures
        that are not group metrics (the recalibration slope, intercept and O:E) judge no row.

    Examples
    --------
    >>> import json
    >>> from pathlib import Path
    >>> from sitecal.results import Evaluation, metrics_table
    >>> doc = json.loads(Path("tests/results/data/evaluation-per-scanner-refit.json").read_text())
    >>> rows = metrics_table(Evaluation.from_dict(doc))
    >>> rows[0].attribute, rows[0].group, rows[0].metric, rows[0].stage
    ('overall', 'All studies', 'ece', 'before')
    """
    judged = _judgements(evaluation.acceptance)
    return tuple(
        _row(group, metric, stage, judged.get((group.attribute, group.group, metric, stage), ()))
        for group in _groups(evaluation)
        for metric in evaluation.metrics
        for stage in _STAGES
    )


def _groups(evaluation: Evaluation) -> Iterator[GroupResult]:
    """``overall``, then each reported attribute's groups, attributes by name as evaluation.json lists them.

    By name rather than in the mapping's order, so that the table of an evaluation read back from its file
    (written with sorted keys) is the table of the evaluation as the run held it.
    """
    yield evaluation.overall
    for attribute in sorted(evaluation.subgroups):
        yield from evaluation.subgroups[attribute]


def _judgements(criteria: Sequence[Criterion]) -> dict[tuple[str, str, str, str], list[tuple[str, str]]]:
    """``(attribute, group, metric, stage)`` to each judging criterion's ``(id, verdict)``, in order."""
    judged: dict[tuple[str, str, str, str], list[tuple[str, str]]] = {}
    for criterion in criteria:
        for result in criterion.results:
            key = (criterion.scope, result.group, criterion.metric, criterion.stage)
            judged.setdefault(key, []).append((criterion.id, result.verdict))
    return judged


def _row(group: GroupResult, metric: str, stage: MetricStage, judged: Sequence[tuple[str, str]]) -> MetricRow:
    """One row: the group's interval of ``metric`` at ``stage``, with the criteria judging it."""
    interval = getattr(group.metrics[metric], stage)
    return MetricRow(
        attribute=group.attribute,
        group=group.group,
        metric=metric,
        stage=stage,
        estimate=interval.estimate,
        low=interval.low,
        high=interval.high,
        n=group.n,
        criterion=SEPARATOR.join(c for c, _ in judged) or None,
        outcome=SEPARATOR.join(v for _, v in judged) or None,
    )


def write_metrics_table(folder: Path, evaluation: Evaluation) -> tuple[Path, ...]:
    """Write ``metrics.csv`` and, where pyarrow is installed, ``metrics.parquet`` into ``folder``.

    Both hold :func:`metrics_table`'s rows with :data:`METRIC_COLUMNS`. In the CSV a number is written
    as Python's ``repr`` (it reads back to the same float) and a null as an empty cell; text cells are
    escaped as every CSV of a run folder (:func:`sitecal._io.csv_cell`). In the Parquet file the
    numbers are float64 (``n`` int64) and an empty ``criterion``/``outcome`` is null.

    Returns
    -------
    tuple of Path
        The files written (``metrics.parquet`` is left out, and logged, without pyarrow).

    Raises
    ------
    OutputError
        When a file cannot be written.
    """
    folder = Path(folder)
    rows = metrics_table(evaluation)
    csv_path = folder / "metrics.csv"
    write_csv_atomic(csv_path, METRIC_COLUMNS, ([getattr(r, c) for c in METRIC_COLUMNS] for r in rows))
    parquet = _parquet_bytes(rows)
    if parquet is None:
        logger.info("metrics.parquet not written: it needs pyarrow (pip install 'sitecal[parquet]')")
        return (csv_path,)
    write_bytes_atomic(folder / "metrics.parquet", parquet)
    return (csv_path, folder / "metrics.parquet")


def _parquet_bytes(rows: Sequence[MetricRow]) -> bytes | None:
    """The rows as a Parquet file's bytes, columns typed and in order; ``None`` without pyarrow."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return None
    types = {"estimate": pa.float64(), "low": pa.float64(), "high": pa.float64(), "n": pa.int64()}
    schema = pa.schema([(c, types.get(c, pa.string())) for c in METRIC_COLUMNS])
    table = pa.table({c: [getattr(r, c) for r in rows] for c in METRIC_COLUMNS}, schema=schema)
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()
