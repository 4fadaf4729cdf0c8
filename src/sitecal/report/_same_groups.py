"""Groups of different attributes that hold the same studies, found so that each is shown once.

At a network where each site has one scanner, "Scanner: DRX Demo" and "Site: St Aldric" are the same
studies: the same estimates, the same gap to the rest, and, printed twice, two disparities where there is
one. The evaluation stores, per group, ``membership``: a fingerprint of the set of evaluation rows it
holds (:func:`sitecal.evaluation.membership_digest`, a truncated sha256 of the sorted row indices, no
identifiers). Two groups with the same fingerprint hold the same studies.

An ``evaluation.json`` written before that field existed lacks it; equal sizes alone prove nothing, so
the fallback asks much more: the same numbers of studies and patients, the same reliability curves
before and after calibration bin by bin (counts, mean confidence, accuracy) and the same estimate of
every metric at both stages, to 9 significant digits. Groups matched that way are shown once too, and
the note says what the match rests on (:attr:`Twin.basis`).

The first group in document order (all studies, then the attributes in the order of
``evaluation.subgroups``) is the one shown; a later one points to it.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["MEMBERSHIP", "Twin", "same_groups"]

#: The field of a group entry that carries its membership fingerprint.
MEMBERSHIP = "membership"
_DIGITS = 9
_STAGES = ("before", "after")


@dataclass(frozen=True)
class Twin:
    """The earlier group that holds the same studies as a later one.

    Attributes
    ----------
    attribute, group : str
        The earlier group ("overall", "All studies" for all studies).
    n : object
        Its number of studies, as stored.
    basis : {"membership", "statistics"}
        "membership": the stored fingerprints are equal; "statistics": no fingerprint was stored, and
        sizes, reliability curves and every estimate agree.
    """

    attribute: str
    group: str
    n: object
    basis: Literal["membership", "statistics"]


def _round(value: object) -> object:
    if isinstance(value, float):
        return float(f"{value:.{_DIGITS}g}")
    return value


def _rounded(values: object) -> tuple[object, ...]:
    return tuple(_round(v) for v in values) if isinstance(values, Sequence) else ()


def _signature(group: Mapping[str, Any], metrics: Sequence[str]) -> tuple[Hashable, ...] | None:
    """What must agree for two groups without a fingerprint to be the same studies (None: too little)."""
    reliability = group.get("reliability")
    n = group.get("n")
    if not isinstance(reliability, Mapping) or not isinstance(n, int) or n < 2:
        return None
    parts: list[Hashable] = [n, group.get("n_patients")]
    for stage in _STAGES:
        curve = reliability.get(stage)
        if not isinstance(curve, Mapping) or not isinstance(curve.get("count"), Sequence):
            return None
        parts += [_rounded(curve.get(k)) for k in ("count", "confidence", "accuracy")]
    for metric in metrics:
        value = (group.get("metrics") or {}).get(metric)
        if not isinstance(value, Mapping):
            return None
        for stage in _STAGES:
            estimate = (value.get(stage) or {}).get("estimate")
            if not isinstance(estimate, int | float):
                return None
            parts.append(_round(float(estimate)))
    return tuple(parts)


def _groups(evaluation: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    if isinstance(evaluation.get("overall"), Mapping):
        yield "overall", evaluation["overall"]
    subgroups = evaluation.get("subgroups")
    for attribute, groups in (subgroups if isinstance(subgroups, Mapping) else {}).items():
        for group in groups if isinstance(groups, Sequence) else ():
            if isinstance(group, Mapping):
                yield str(attribute), group


def same_groups(evaluation: Mapping[str, Any]) -> dict[tuple[str, str], Twin]:
    """Map each group that repeats an earlier group's studies to that earlier group.

    Parameters
    ----------
    evaluation : Mapping
        ``evaluation.json`` content.

    Returns
    -------
    dict
        ``{(attribute, group): Twin}`` for every later group of a set of identical groups; a group of
        the same attribute is never matched (its groups are disjoint).

    Examples
    --------
    >>> ev = {"subgroups": {"scanner": [{"group": "A", "n": 5, "membership": "ab12"}],
    ...                     "site": [{"group": "S", "n": 5, "membership": "ab12"},
    ...                              {"group": "T", "n": 5, "membership": "cd34"}]}}
    >>> same_groups(ev)
    {('site', 'S'): Twin(attribute='scanner', group='A', n=5, basis='membership')}
    """
    metrics = [str(m) for m in evaluation.get("metrics") or ()]
    first: dict[Hashable, tuple[str, Mapping[str, Any]]] = {}
    twins: dict[tuple[str, str], Twin] = {}
    for attribute, group in _groups(evaluation):
        digest = group.get(MEMBERSHIP)
        basis: Literal["membership", "statistics"]
        if isinstance(digest, str) and digest:
            key: Hashable = ("membership", digest)
            basis = "membership"
        else:
            signature = _signature(group, metrics) if metrics else None
            if signature is None:
                continue
            key, basis = ("statistics", signature), "statistics"
        earlier = first.setdefault(key, (attribute, group))
        if earlier[1] is group or earlier[0] == attribute:
            continue
        name = "All studies" if earlier[0] == "overall" else str(earlier[1].get("group"))
        twins[(attribute, str(group.get("group")))] = Twin(earlier[0], name, earlier[1].get("n"), basis)
    return twins
