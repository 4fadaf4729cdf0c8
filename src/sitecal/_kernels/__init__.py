"""Compiled loops of the resampling engine (numba): each resample's sums in one pass, in a fixed order.

Every kernel reduces one resample (or permutation) at a time from its own inputs only, adding in an
order fixed by the data (cluster order, or row order), never by the chunk, the thread or the machine:
no ``fastmath``, so the compiler keeps each addition where the loop puts it. The kernels release the
GIL, so the callers' threads run them side by side. Compiled code is cached on disk (numba's cache,
next to this file or in the user's cache folder), so a process pays the compilation once per install.
"""

from sitecal._kernels._calibrated import PROGRAMS, calibrated_entry_sums, nll_row_terms
from sitecal._kernels._draws import counted_sums, draw_counts, membership_sums, stratified_draws
from sitecal._kernels._flags import assign_rows, grouped_row_sums, layout_starts
from sitecal._kernels._surrogate import surrogate_roots
from sitecal._kernels._terms import top_label_entries, weighted_entry_sums

__all__ = [
    "PROGRAMS",
    "assign_rows",
    "calibrated_entry_sums",
    "counted_sums",
    "draw_counts",
    "grouped_row_sums",
    "layout_starts",
    "membership_sums",
    "nll_row_terms",
    "stratified_draws",
    "surrogate_roots",
    "top_label_entries",
    "weighted_entry_sums",
]
