"""Split keys: what orders patients for the fit/evaluation split, the same at every install.

The split must depend on the data and the protocol only. Pseudonyms cannot order it: they are keyed
hashes under the site's secret key, so a new install (a new key) would draw another split and another
verdict from the same data. A split key is instead the SHA-256 of the patient's own identifier (the
DICOM PatientID, a predictions file's patient column, or the study's key for a study without a
patient), computed in memory and never written: it names nobody in an output because it never reaches
one.

A predictions file that sitecal writes holds pseudonyms only, so it carries each study's rank among
the file's studies in (patient, study) split-key order (``split_rank``); reading it back gives the same
order, hence the same split. A rank says where a study falls in an order drawn from identifiers; it
names nobody without the list of the cohort's identifiers. Under a network's shared key
(``privacy.network_key_file``) the split keys are drawn from the network pseudonyms instead
(:func:`network_split_keys`), so that parts predicted at different sites join in one order.

>>> a, b = split_key("patient", "MRN-1"), split_key("patient", "MRN-2")
>>> len(a), a == split_key("patient", "MRN-1"), a != b
(64, True, True)
>>> split_ranks([b, a, b])
[1, 0, 1]
>>> sorted([rank_key(10), rank_key(9)])
['rank:000000000009', 'rank:000000000010']
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TypeVar

__all__ = ["network_split_keys", "rank_key", "split_key", "split_ranks"]

T = TypeVar("T", str, tuple[str, str])


def split_key(kind: str, identifier: str) -> str:
    """The split key of an identifier of ``kind`` (``"patient"``, ``"study"`` or a file's key column)."""
    data = f"sitecal split\0{kind}\0{identifier}".encode("utf-8", "surrogateescape")
    return hashlib.sha256(data).hexdigest()


def network_split_keys(study_key: str, patient_key: str) -> tuple[str, str]:
    """The (patient, study) split keys of a study under a network key, drawn from its pseudonyms.

    The sites of a network ship pseudonyms under the network's shared key, never identifiers; keys drawn
    from those pseudonyms order a patient the same way at every site and centrally (another network key
    gives another order, as the key is part of the network's set-up, like the protocol).
    """
    return split_key("network patient", patient_key), split_key("network study", study_key)


def split_ranks(keys: Sequence[T]) -> list[int]:
    """Each key's rank among the distinct keys, in sorted order (equal keys share a rank)."""
    rank = {key: i for i, key in enumerate(sorted(set(keys)))}
    return [rank[key] for key in keys]


def rank_key(rank: int) -> str:
    """A split key standing for a rank read from a predictions file (sorts like the rank)."""
    return f"rank:{rank:012d}"
