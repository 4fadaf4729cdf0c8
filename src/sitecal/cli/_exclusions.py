"""The console's summary of what a scan left out: one line per reason, most frequent first."""

from __future__ import annotations

from collections.abc import Sequence

from sitecal._text import plural

#: each unit of an exclusion row: its noun for one, and for any other count
_UNITS = {
    "file": ("file", "files"),
    "image": ("image", "images"),
    "series": ("series", "series"),
    "study": ("study", "studies"),
    "label": ("label row", "label rows"),
    "prediction": ("prediction row", "prediction rows"),
}


def print_exclusions(evaluation: object) -> None:
    """One console line per exclusion reason (most frequent first), so that none goes unnoticed."""
    flow = evaluation.get("cohort_flow", {}) if isinstance(evaluation, dict) else {}
    print_exclusion_rows(flow.get("exclusions") or [])


def print_exclusion_rows(found: Sequence[dict[str, object]], *, listed_in: str = "exclusions.csv") -> None:
    """Print the exclusion counts ``found`` (stage, reason, unit, count), the first 12 reasons in full."""
    rows = sorted(found, key=lambda r: (-int(str(r["count"])), str(r["stage"]), str(r["reason"])))
    if not rows:
        print("Excluded: nothing.")
        return
    total = sum(int(str(r["count"])) for r in rows)
    print(f"Excluded: {total} (see {listed_in}):")
    for row in rows[:12]:
        count = int(str(row["count"]))
        unit = plural(count, *_UNITS.get(str(row.get("unit", "")), ("item", "items")))
        print(f"  {count:>6} {unit} at {row['stage']}: {row['reason']}")
    if len(rows) > 12:
        print(f"  ... and {len(rows) - 12} more reasons ({listed_in} lists every one)")
