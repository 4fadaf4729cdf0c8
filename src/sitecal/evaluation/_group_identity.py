"""A group's membership fingerprint: which evaluation rows it holds, without naming any of them.

Groups of different attributes can hold the same studies (at a network where each site has one scanner,
"Scanner: DRX Demo" and "Site: St Aldric" are the same 585 studies). Their sizes are equal, but equal
sizes prove nothing; the report needs to know the sets are equal to show such groups once. Each group
of ``evaluation.json`` therefore carries a short fingerprint of its set of rows: equal fingerprints,
the same studies.

The fingerprint is the sha256 of the group's evaluation row indices, sorted and written as
little-endian 64-bit integers after a version prefix, cut to :data:`DIGEST_CHARS` hex digits (64 bits:
the chance that two different sets among a few hundred groups share one is below 1e-15). Row indices are
positions in the evaluation split as the evaluation orders it, not study keys or patient keys, and a
truncated hash of them says nothing about who is in a group; the fingerprints compare groups within one
document only.
"""

from __future__ import annotations

import hashlib

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["DIGEST_CHARS", "membership_digest"]

#: Hex digits kept of the sha256.
DIGEST_CHARS = 16
_PREFIX = b"sitecal group membership v1\n"


def membership_digest(rows: ArrayLike) -> str:
    """Return the fingerprint of a set of evaluation rows.

    Parameters
    ----------
    rows : array_like
        Either a boolean mask over the evaluation rows, shape (N,), or the integer indices of the rows
        the group holds (any order; each row once).

    Returns
    -------
    str
        ``sha256(prefix + sorted indices as '<i8' bytes)``, its first :data:`DIGEST_CHARS` hex digits.
        The same set of rows gives the same string, whatever its order or form.

    Raises
    ------
    ValueError
        If ``rows`` is not one-dimensional, holds a negative or repeated index, or is neither boolean
        nor integer.

    Examples
    --------
    >>> membership_digest([2, 0, 5]) == membership_digest(np.array([True, False, True, False, False, True]))
    True
    >>> membership_digest([0, 2, 5]) == membership_digest([0, 2, 4])
    False
    >>> len(membership_digest([]))
    16
    """
    array = np.asarray(rows)
    if array.ndim != 1:
        raise ValueError(
            f"The 'rows' parameter of membership_digest must be one-dimensional. Got shape {array.shape}."
        )
    if array.dtype == bool:
        indices = np.flatnonzero(array)
    elif array.size == 0 or np.issubdtype(array.dtype, np.integer):
        indices = np.sort(array.astype(np.int64))
        if indices.size and indices[0] < 0:
            raise ValueError(
                f"The 'rows' parameter of membership_digest must hold row indices >= 0. Got {indices[0]}."
            )
        if np.any(np.diff(indices) == 0):
            raise ValueError(
                "The 'rows' parameter of membership_digest must name each row once. Got a repeated index."
            )
    else:
        raise ValueError(
            "The 'rows' parameter of membership_digest must be a boolean mask or integer row indices. "
            f"Got dtype {array.dtype}."
        )
    payload = _PREFIX + np.ascontiguousarray(indices, dtype="<i8").tobytes()
    return hashlib.sha256(payload).hexdigest()[:DIGEST_CHARS]
