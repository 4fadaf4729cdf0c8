"""Cohort characteristics section: who was analysed, overall and in every group of every attribute.

Every number is read from ``evaluation.json``'s ``characteristics`` entry; documents written before sitecal
recorded it get a sentence saying so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from reportlab.platypus import Flowable

from ._context import Context
from ._inputs import get
from ._styles import table
from ._text import NOT_RECORDED, format_count, name_text, para_text
from ._wording import word

__all__ = ["cohort_characteristics", "format_share"]

_ABSENT = "not recorded in this run's evaluation.json"


def format_share(share: object) -> str:
    """Format a stored share (0 to 1) as a percentage with one decimal, ``0.125`` → ``12.5%``."""
    if isinstance(share, int | float) and not isinstance(share, bool):
        return f"{share * 100:.1f}%"
    return NOT_RECORDED


def _count_share(count: object, share: object) -> str:
    return f"{format_count(count)} ({format_share(share)})"


def _lines(entries: object, label: str) -> str:
    """One escaped line per entry: ``value count (share)``."""
    if not isinstance(entries, Sequence) or isinstance(entries, str):
        return para_text(NOT_RECORDED)
    lines = [
        f"{name_text(get(e, label))}&nbsp;&nbsp;{para_text(_count_share(get(e, 'count'), get(e, 'share')))}"
        for e in entries
    ]
    return "<br/>".join(lines) or "none"


def _single_valued(rows: Sequence[Any], key: str) -> bool:
    """Whether every row's mix of ``key`` is one value (an intersection that contains the attribute)."""
    mixes = [row.get(key) if isinstance(row, Mapping) else None for row in rows]
    return bool(mixes) and all(isinstance(m, list) and len(m) == 1 for m in mixes)


def _columns(
    chars: Mapping[str, Any], attribute: str | None, rows: Sequence[Any]
) -> list[tuple[str, str, float]]:
    """(header, row key, relative width) of the mix columns to print.

    The attribute's own mix is not repeated, nor a mix that is one value in every group (an intersection
    with sex or age band).
    """
    columns = [("Classes: count (share)", "classes", 1.4)]
    for key, header, weight in (("sex", "Sex", 0.9), ("age_band", "Age band", 1.1)):
        source = chars.get("sex_attribute" if key == "sex" else "age_attribute")
        if source is not None and source != attribute and not (attribute and _single_valued(rows, key)):
            columns.append((header, key, weight))
    return columns


def _table(ctx: Context, chars: Mapping[str, Any], rows: Sequence[Any], attribute: str | None) -> Any:
    mixes = _columns(chars, attribute, rows)
    fixed = [0.16, 0.15, 0.1]
    scale = (1 - sum(fixed)) / sum(w for _, _, w in mixes)
    num = ctx.styles.cell_num
    cells: list[list[Any]] = [
        [
            ctx.head("Group"),
            ctx.p("Studies (share)<br/>fit / evaluation", ctx.styles.cell_head_num),
            ctx.head("Patients", right=True),
            *[ctx.head(header) for header, _, _ in mixes],
        ]
    ]
    for row in rows:
        studies = para_text(_count_share(get(row, "n"), get(row, "share_of_cohort")))
        split = para_text(f"{format_count(get(row, 'n_fit'))} / {format_count(get(row, 'n_evaluation'))}")
        cells.append(
            [
                ctx.cell(get(row, "group")),
                ctx.p(f"{studies}<br/>{split}", num),
                ctx.cell(format_count(get(row, "n_patients")), style=num),
                *[
                    ctx.p(_lines(get(row, key), "class" if key == "classes" else "value"), ctx.styles.cell)
                    for _, key, _ in mixes
                ],
            ]
        )
    widths = [w * ctx.width for w in fixed] + [w * scale * ctx.width for _, _, w in mixes]
    return table(cells, widths)


def cohort_characteristics(ctx: Context) -> list[Flowable]:
    """Studies, patients, classes, sex and age-band mix of all analysed studies and of every group.

    One table for all analysed studies, then one per reported attribute (its header row repeated on
    every page the table runs onto). Group names are printed literally.
    """
    story: list[Flowable] = [ctx.h1("Cohort characteristics")]
    chars = get(ctx.evaluation, "characteristics")
    if not isinstance(chars, Mapping):
        return [*story, ctx.p(f"Cohort characteristics: {_ABSENT}.")]
    split = get(ctx.evaluation, "split")
    if isinstance(split, Mapping) and split.get("method") == "crossfit":
        parts = (
            "Every analysed study. Under cross-fitting each study is fitted on (for the other folds' "
            "temperatures) and evaluated once, so its fit and evaluation counts are equal."
        )
    else:
        parts = (
            f"Every analysed study, in both splits ({ctx.fitted(plural=True)} are fitted on the fit split; "
            "every metric is measured on the evaluation split)."
        )
    story.append(
        ctx.p(
            f"{parts} A group's share is of all analysed studies; class, sex and age-band shares are of "
            "the group's own studies. Groups whose attribute could not be read are listed as "
            "<i>unknown</i>, like any other group."
        )
    )
    story += [ctx.p(para_text(word(note)), ctx.styles.note) for note in chars.get("notes") or []]
    overall = chars.get("overall")
    if isinstance(overall, Mapping):
        story += ctx.table_block("All analysed studies.", _table(ctx, chars, [overall], None))
    subgroups = chars.get("subgroups")
    if not isinstance(subgroups, Mapping):
        return [*story, ctx.p(f"Characteristics per subgroup: {_ABSENT}.")]
    for attribute, rows in subgroups.items():
        label = ctx.attribute_label(attribute)
        if not isinstance(rows, Sequence) or not rows:
            story.append(ctx.p(f"No {para_text(label.lower())} groups were recorded."))
            continue
        story += ctx.table_block(
            f"Cohort by {para_text(label.lower())}.", _table(ctx, chars, rows, str(attribute))
        )
    return story
