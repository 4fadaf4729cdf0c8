r"""Which groups differ from the rest: a size-matched permutation test with max-T multiplicity control.

A group-vs-rest gap of a calibration error cannot be read at face value: the plug-in ECE of a small group
is biased upward (about :math:`\sqrt{\text{bins}/n}` from noise alone), so a small, perfectly calibrated
group "differs" from a large rest every time. The reference here is what the gap would be for a *random*
set of patients of the same size: whole patients are permuted between the groups (each group keeps its
number of studies), and each group's observed gap is compared with its gaps under the permutations. The
bias that comes from size alone is then in the reference too, for every metric, debiased or not.

Multiplicity across the attribute's groups is controlled by the single-step max-T procedure (Westfall &
Young 1993): each group's gap is standardised by its permutation standard deviation, and its adjusted
p-value is the share of permutations whose *largest* standardised gap over all judged groups reaches it.
A group is **flagged** when its adjusted p-value is at most ``1 - level``: then the chance that any group
of a calibrated, exchangeable cohort is flagged is at most ``1 - level``, whatever the group sizes.

The null hypothesis is exchangeability: the group's patients are like any other patients of the cohort.
Groups whose case mix differs (e.g. more difficult studies on one scanner) can be flagged without any
scanner effect; a flag says the group differs, not why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sitecal._kernels import grouped_row_sums
from sitecal.errors import DataError
from sitecal.metrics.registry import ECE
from sitecal.metrics.registry import metric as registry_metric
from sitecal.stats._disparity import checked_groups
from sitecal.stats._flag_permutations import PatientLayout, PermutationOptions
from sitecal.stats._resample import for_each

__all__ = ["GroupFlags", "size_matched_flags", "size_matched_flags_attributes", "size_matched_flags_each"]

# Permutations evaluated together: at most 100, and at most about 64 MB of their layouts (8 bytes per
# patient) and (chunk, rows) assignments (a byte per row for up to 256 groups) at any cohort size. The
# chunk depends on the numbers of rows and patients only, never on the machine.
_CHUNK = 100
_CHUNK_BYTES = 64 << 20


@dataclass(frozen=True)
class GroupFlags:
    """Each judged group's gap to the rest, against random patient sets of its size.

    Attributes
    ----------
    metric : str
    groups : tuple of str
        The groups judged (at least ``min_group_size`` rows), sorted.
    gap : Mapping[str, float]
        Observed ``m_g - m_rest``.
    expected_gap : Mapping[str, float]
        Its mean over the permutations: the gap a random set of patients of the same size shows (not 0
        for a metric biased by size, as the plug-in ECE).
    adjusted_p : Mapping[str, float]
        Max-T adjusted p-value, ``(1 + #{perm: max_h z*_h >= z_g}) / (1 + n_permutations)``.
    alternative : str
        "worse" (only a gap on the metric's worse side is flagged) or "two-sided": always for a signed
        metric (direction ``"target"``: the calibration gap, O:E), which has no worse side (an
        over-confident group and an under-confident one both differ from the rest).
    flagged : Mapping[str, bool]
        ``adjusted_p <= 1 - level``.
    n_permutations : int
    level : float
    seed : int
    """

    metric: str
    groups: tuple[str, ...]
    gap: Mapping[str, float]
    expected_gap: Mapping[str, float]
    adjusted_p: Mapping[str, float]
    flagged: Mapping[str, bool]
    n_permutations: int
    level: float
    seed: int
    alternative: str = "worse"

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict."""
        return {
            "metric": self.metric,
            "groups": list(self.groups),
            "gap": dict(self.gap),
            "expected_gap": dict(self.expected_gap),
            "adjusted_p": dict(self.adjusted_p),
            "flagged": dict(self.flagged),
            "n_permutations": self.n_permutations,
            "level": self.level,
            "seed": self.seed,
            "alternative": self.alternative,
        }


def size_matched_flags(
    probs: ArrayLike,
    labels: ArrayLike,
    groups: ArrayLike,
    *,
    clusters: ArrayLike | None,
    metric: str = ECE.name,
    n_bins: int = 15,
    min_group_size: int = 1,
    n_permutations: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    alternative: Literal["worse", "two-sided"] = "worse",
) -> GroupFlags:
    """Flag the groups whose gap to the rest exceeds what random patient sets of their size show.

    Parameters
    ----------
    probs : array_like, shape (N, C)
    labels : array_like, shape (N,)
    groups : array_like of str, shape (N,)
    clusters : array_like of shape (N,) or None
        Patient of each row: whole patients are permuted (None: each row its own patient). The rows are
        taken in patient order, so the result depends on the patients and the seed, not on the row order.
    metric : str, default "ece"
        A summable metric of the registry.
    n_bins : int, default 15
    min_group_size : int, default 1
        Smaller groups are not judged (their rows still take part in the permutations).
    n_permutations : int, default 1000
    level : float, default 0.95
        A group is flagged when its adjusted p-value is at most ``1 - level``.
    seed : int, default 0
    alternative : {"worse", "two-sided"}, default "worse"
        "worse": flag only groups whose gap lies on the metric's worse side of the reference (higher for
        an error, lower for accuracy): the question "for whom are the probabilities not honest";
        "two-sided": a group better than the rest is flagged too. A signed metric is always tested
        two-sided (see :attr:`GroupFlags.alternative`).

    Returns
    -------
    GroupFlags

    Notes
    -----
    Each permutation lays the rows out in a random order of the patients (a patient's rows together) and
    assigns them the original sequence of group labels in patient order: every group keeps its number of
    rows exactly, and only a patient at the boundary between two groups' runs is split. With ``d_g`` the
    gap and ``d*_g`` its permutation values, ``z_g = s (d_g - mean d*_g) / sd d*_g`` with ``s`` = 1 for
    an error and -1 for accuracy (two-sided: ``|z_g|``); the adjusted p-value of group ``g`` is the share
    of permutations with ``max_h z*_h >= z_g`` (counting the observed assignment once).

    References
    ----------
    P. H. Westfall, S. S. Young. *Resampling-Based Multiple Testing*. Wiley, 1993 (single-step max-T).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> conf = rng.uniform(0.5, 1.0, 600)
    >>> g = np.array(["a"] * 100 + ["b"] * 200 + ["c"] * 300)
    >>> correct = rng.uniform(size=600) < np.where(g == "a", conf - 0.25, conf)  # 'a' is overconfident
    >>> probs = np.stack([conf, 1 - conf], axis=1)
    >>> y = np.where(correct, 0, 1)
    >>> res = size_matched_flags(probs, y, g, clusters=None, n_permutations=200)
    >>> res.flagged
    {'a': True, 'b': False, 'c': False}
    """
    return size_matched_flags_each(
        [(probs, metric)],
        labels,
        groups,
        clusters=clusters,
        n_bins=n_bins,
        min_group_size=min_group_size,
        n_permutations=n_permutations,
        level=level,
        seed=seed,
        alternative=alternative,
    )[0]


def size_matched_flags_each(
    cases: Sequence[tuple[ArrayLike, str]],
    labels: ArrayLike,
    groups: ArrayLike,
    *,
    clusters: ArrayLike | None,
    n_bins: int = 15,
    min_group_size: int = 1,
    n_permutations: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    alternative: Literal["worse", "two-sided"] = "worse",
) -> list[GroupFlags]:
    """:func:`size_matched_flags` for several (probabilities, metric) cases of the same rows and groups.

    The permutations depend on the patients, the groups and the seed only, so each is drawn once and
    every case's gaps are computed on it: the result for each case is what :func:`size_matched_flags`
    gives it alone, for one draw of the permutations.
    """
    return size_matched_flags_attributes(
        [(groups, cases)],
        labels,
        clusters=clusters,
        n_bins=n_bins,
        min_group_size=min_group_size,
        n_permutations=n_permutations,
        level=level,
        seed=seed,
        alternative=alternative,
    )[0]


class _Attribute:
    """One attribute's groups and cases in the flags' permutation test: its observed and permuted gaps."""

    def __init__(
        self,
        groups: ArrayLike,
        cases: Sequence[tuple[ArrayLike, str]],
        labels: ArrayLike,
        n_bins: int,
        min_group_size: int,
        func: str,
    ) -> None:
        if not cases:
            raise DataError(f"{func}: give at least one (probabilities, metric) case.")
        checked = [
            checked_groups(probs, labels, groups, metric, n_bins, min_group_size, func=func)
            for probs, metric in cases
        ]
        self.n = checked[0][0].shape[0]
        grouped = checked[0][3]
        self.names, self.codes, self.judged = grouped.names, grouped.codes, grouped.judged
        self.metrics = [metric for _, metric in cases]
        # the group codes as narrow integers: the permutations' (P, N) assignments are read once per row
        self.codes = self.codes.astype(np.min_scalar_type(max(self.names.shape[0] - 1, 0)))
        # every case's terms side by side, row by row: case c's columns from its offset (each column fed
        # by one entry of one case, so each sum still adds its group's rows in row order)
        self.forms = []
        all_columns, all_values, at = [], [], 0
        for probs_c, y_c, statistic, _ in checked:  # a loop over cases: sparse terms, their total and width
            columns, values = statistic.sparse_terms(np.ascontiguousarray(probs_c.T), y_c)
            width = statistic.row_terms(probs_c[:1], y_c[:1]).shape[1]
            total = np.bincount(columns.reshape(-1), values.reshape(-1), minlength=width).astype(np.float64)
            self.forms.append((statistic, at, width, total))
            all_columns.append(np.broadcast_to(columns, values.shape).T + at)
            all_values.append(values.T)
            at += width
        self.n_columns = at
        self.columns = np.ascontiguousarray(np.concatenate(all_columns, axis=1), np.min_scalar_type(at))
        self.values = np.ascontiguousarray(np.concatenate(all_values, axis=1), dtype=np.float64)

    def gaps(self, assigned: NDArray[np.integer]) -> list[NDArray[np.float64]]:
        """(P, N) group codes -> per case, (P, G) gap of every group to the rest."""
        size, n_groups = assigned.shape[0], self.names.shape[0]
        sums = grouped_row_sums(assigned, self.columns, self.values, self.n_columns, n_groups)
        out = []
        for statistic, at, width, total in self.forms:  # a loop over cases
            own = np.ascontiguousarray(sums[:, :, at : at + width]).reshape(size * n_groups, width)
            with np.errstate(invalid="ignore", divide="ignore"):
                gap = statistic.from_sums(own) - statistic.from_sums(total[None, :] - own)
            out.append(np.asarray(gap, dtype=np.float64).reshape(size, n_groups))
        return out


def size_matched_flags_attributes(
    attributes: Sequence[tuple[ArrayLike, Sequence[tuple[ArrayLike, str]]]],
    labels: ArrayLike,
    *,
    clusters: ArrayLike | None,
    n_bins: int = 15,
    min_group_size: int = 1,
    n_permutations: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    alternative: Literal["worse", "two-sided"] = "worse",
    workers: int = 1,
) -> list[list[GroupFlags]]:
    """:func:`size_matched_flags_each` for several attributes of the same rows: per attribute, per case.

    ``attributes``: each attribute's groups (N,) and its (probabilities, metric) cases. A permutation
    depends on the patients and the seed only, not on the groups: each is drawn once and the patients
    laid out once, and every attribute's groups are read off that layout, so each attribute's flags are
    what :func:`size_matched_flags_each` gives it alone. ``workers`` threads compute the attributes of a
    chunk of permutations side by side (the results do not depend on it).
    """
    func = "size_matched_flags"
    options = PermutationOptions.checked(n_permutations, level, seed, alternative, func=func)
    if not attributes:
        raise DataError(f"{func}: give at least one attribute.")
    parts = [_Attribute(g, cases, labels, n_bins, min_group_size, func) for g, cases in attributes]
    layout = PatientLayout.of(parts[0].n, clusters, func=func)
    observed = [[gaps[0] for gaps in part.gaps(part.codes[None, :])] for part in parts]
    permuted = _permuted_gaps(parts, layout, options, workers)
    return [
        [
            _flags(metric, observed[a][c], permuted[a][c], part.names, part.judged, options)
            for c, metric in enumerate(part.metrics)
        ]
        for a, part in enumerate(parts)
    ]


def _permuted_gaps(
    parts: list[_Attribute], layout: PatientLayout, options: PermutationOptions, workers: int
) -> list[list[NDArray[np.float64]]]:
    """Per attribute and case, the (P, G) gaps under each permutation of one stream, chunk by chunk.

    A permutation depends on the patients and the seed only: each is drawn once, in order from the one
    stream, and every attribute's groups are read off its layout. One thread draws the next chunk's
    permutations while ``workers`` threads compute this chunk's gaps, an attribute each.
    """
    n, n_perm = layout.patient.shape[0], options.n_permutations
    label_sequences = [part.codes[layout.by_patient] for part in parts]
    permuted = [[np.empty((n_perm, part.names.shape[0])) for _ in part.forms] for part in parts]
    rng = np.random.default_rng(options.seed)
    itemsize = max(sequence.dtype.itemsize for sequence in label_sequences)
    chunk = max(1, min(_CHUNK, _CHUNK_BYTES // (8 * layout.n_patients + itemsize * n)))
    bounds = [(a, min(n_perm, a + chunk)) for a in range(0, n_perm, chunk)]

    def layouts(size: int) -> list[NDArray[np.int64]]:
        """The next ``size`` permutations' layouts: the patients in rank order, each's rows in order."""
        return [layout.starts(rng) for _ in range(size)]

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="sitecal-permutations") as ahead:
        upcoming = ahead.submit(layouts, bounds[0][1] - bounds[0][0])
        for k, (start, _) in enumerate(bounds):  # a loop over chunks of permutations
            starts = upcoming.result()
            if k + 1 < len(bounds):
                upcoming = ahead.submit(layouts, bounds[k + 1][1] - bounds[k + 1][0])

            def one(a: int, at: int = start, starts: list[NDArray[np.int64]] = starts) -> None:
                """Attribute ``a``'s gaps under the chunk's permutations, every case."""
                for c, gaps in enumerate(_assigned_gaps(parts[a], layout, label_sequences[a], starts)):
                    permuted[a][c][at : at + len(starts)] = gaps

            for_each(one, len(parts), workers)
    return permuted


def _assigned_gaps(
    part: _Attribute, layout: PatientLayout, sequence: NDArray[np.integer], starts: list[NDArray[np.int64]]
) -> list[NDArray[np.float64]]:
    """One attribute's gaps, per case (P, G), under the permutations laid out at ``starts``."""
    assigned = np.empty((len(starts), layout.patient.shape[0]), dtype=sequence.dtype)
    for i, first in enumerate(starts):  # a loop over the chunk's permutations
        assigned[i] = layout.assign(first, sequence)
    return part.gaps(assigned)


def _flags(
    metric: str,
    observed: NDArray[np.float64],
    permuted: NDArray[np.float64],
    names: NDArray[Any],
    cols: NDArray[np.int64],
    options: PermutationOptions,
) -> GroupFlags:
    """The max-T adjusted p-values and flags from the observed and permuted gaps of one case."""
    expected = permuted[:, cols].mean(axis=0)
    spread = permuted[:, cols].std(axis=0, ddof=1)
    direction = registry_metric(metric).direction
    # a signed metric (calibration gap, O:E) has no worse side: either way
    alternative = "two-sided" if direction == "target" else options.alternative
    # standardised so that larger is worse (or farther, two-sided)
    sign = -1.0 if direction == "higher" else 1.0
    with np.errstate(invalid="ignore", divide="ignore"):
        z = sign * (observed[cols] - expected) / spread
        z_perm = sign * (permuted[:, cols] - expected) / spread
    if alternative == "two-sided":
        z, z_perm = np.abs(z), np.abs(z_perm)
    z = np.where(np.isfinite(z), z, -np.inf)  # no spread: the gap cannot differ from the reference
    largest = np.nan_to_num(z_perm, nan=-np.inf, posinf=-np.inf).max(axis=1)
    adjusted = (1.0 + (largest[:, None] >= z[None, :] - 1e-12).sum(axis=0)) / (1.0 + options.n_permutations)
    judged_names = tuple(str(names[i]) for i in cols)
    return GroupFlags(
        metric=metric,
        groups=judged_names,
        gap={name: float(observed[i]) for name, i in zip(judged_names, cols, strict=True)},
        expected_gap={name: float(e) for name, e in zip(judged_names, expected, strict=True)},
        adjusted_p={name: float(a) for name, a in zip(judged_names, adjusted, strict=True)},
        flagged={
            name: bool(a <= 1.0 - options.level) for name, a in zip(judged_names, adjusted, strict=True)
        },
        n_permutations=options.n_permutations,
        level=options.level,
        seed=options.seed,
        alternative=alternative,
    )
