"""Which predictions-file subgroup columns may be shown as they are: few entries, none like an identifier.

A column named like an identifier is refused by the protocol (``sitecal.protocol._base.refused_column``).
Any other column a site shows without a mapping is free text to sitecal, written by whoever exported the
file: :func:`check_subgroup_columns` refuses it when its entries are many or one of them has the shape of
an identifier, before anything is evaluated or written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from sitecal.cohort._cells import identifier_shape
from sitecal.cohort.attributes import UNKNOWN, attribute_value
from sitecal.errors import DataError
from sitecal.protocol import SHOWN_TAGS, SubgroupSettings

if TYPE_CHECKING:
    from sitecal.cohort.predictions_file import PredictionTable

__all__ = ["MAX_FREE_COLUMN_VALUES", "check_subgroup_columns"]

#: The most distinct values a subgroup column shown as it is (no mapping, no bands, not named like a tag of
#: ``SHOWN_TAGS``) may hold. A subgroup is a handful of groups (sites, scanners, protocols: the demo's
#: attributes have 2 to 5, a network a few dozen sites at most, which a mapping can group); a column of
#: more values is more likely an identifier or free text than a grouping, and a report of more groups is
#: not read. A site with more groups lists them in a mapping.
MAX_FREE_COLUMN_VALUES = 20


def check_subgroup_columns(table: PredictionTable, subgroups: Mapping[str, SubgroupSettings]) -> None:
    r"""Refuse a subgroup column shown as it is whose values may name people.

    A column with a ``mapping`` (only the site's group names are shown) or ``bands`` (only band labels),
    or named exactly as a tag of ``SHOWN_TAGS`` (shown as that tag would be), passes. Any other column's
    normalised values (``unknown`` aside) must be at most :data:`MAX_FREE_COLUMN_VALUES` distinct values,
    none of the shape of an identifier (:func:`~sitecal.cohort._cells.identifier_shape`: a person's
    name, a long number, a date, a UID, an e-mail address). Its values held by fewer than
    ``privacy.min_count_shown`` studies are pooled afterwards, as every subgroup's.

    Raises
    ------
    DataError
        Naming the file, the subgroup and the column (never a value), and the fix: a mapping.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from sitecal.cohort.predictions_file import read_predictions
    >>> path = Path(tempfile.mkdtemp()) / "vendor.csv"
    >>> _ = path.write_text("AccessionNumber,ward,logit:a,logit:b\nA1,DOE^JANE,0,1\n", encoding="utf-8")
    >>> table = read_predictions(path, class_names=["a", "b"], key_column="AccessionNumber", columns=["ward"])
    >>> try:
    ...     check_subgroup_columns(table, {"ward": SubgroupSettings(column="ward")})
    ... except DataError as exc:
    ...     print(str(exc).split(": ", 1)[1][:84])
    subgroups.ward.column: column 'ward' holds an entry shaped like a personal name (not
    """
    for name, settings in subgroups.items():
        column = settings.column
        if column is None or settings.mapping is not None or settings.bands is not None:
            continue
        if column in SHOWN_TAGS:
            continue
        cells = (
            table.usable.columns[column]
            if table.usable is not None and column in table.usable.columns
            else [row.columns.get(column, "") for row in table.rows.values()]
        )
        values = {attribute_value(column, {column: cell}) for cell in set(cells)} - {UNKNOWN}
        if len(values) > MAX_FREE_COLUMN_VALUES:
            problem = (
                f"holds {len(values):,} distinct entries, more than the {MAX_FREE_COLUMN_VALUES} a column "
                "shown as it is may hold (so many are more likely identifiers or free text than groups)"
            )
        else:
            shapes = sorted({shape for value in values if (shape := identifier_shape(value)) is not None})
            if not shapes:
                continue
            problem = f"holds an entry shaped like {' and '.join(shapes)} (not shown)"
        # no quote after the word value: the console's scrubber would take the text between for a value
        raise DataError(
            f"{table.path}: subgroups.{name}.column: column '{column}' {problem}, and a subgroup column "
            f"without a mapping is shown in the report as it is. Give subgroups.{name} a mapping file "
            "(mapping: <file>.csv, with the columns value and group) to show each of its entries as a "
            "group name you choose (entries the file does not list become unmapped), or remove the "
            "subgroup."
        )
