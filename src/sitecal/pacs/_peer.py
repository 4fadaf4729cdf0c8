"""What every PACS route offers the retrieval: find the query's studies, fetch a study into the store.

A route (:class:`~sitecal.pacs._dicomweb.DicomwebPeer`, :class:`~sitecal.pacs._dimse.DimsePeer`) is a
context manager: it opens what it needs on entry (a storage SCP for C-MOVE) and closes its connections
on exit. Its counters say how much was asked of the PACS.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol

from sitecal.errors import DataError
from sitecal.pacs._store import InstanceStore

__all__ = ["PacsError", "Peer", "StudyRef", "too_many_studies"]


class PacsError(Exception):
    """A PACS request failed; the message says what to check (no credential, no UID).

    ``transient``: the failure may not recur when the request is asked again (a dropped connection, a
    server busy, an answer that contradicts the study search): the retrieval asks again after a pause
    before it excludes the study. ``fatal``: the failure would recur for every study (a redirect: the
    service is not where the protocol says): the retrieval stops instead of excluding the study.
    """

    def __init__(self, message: str, *, transient: bool = False, fatal: bool = False) -> None:
        super().__init__(message)
        self.transient, self.fatal = transient, fatal


@dataclass(frozen=True)
class StudyRef:
    """A study the query returned (its UID in memory only)."""

    study_uid: str


class Peer(Protocol):
    """A PACS route the retrieval drives (thread-safe: studies are fetched concurrently)."""

    route: str
    requests: int
    connections: int

    def __enter__(self) -> Peer: ...

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...

    def find_studies(self, filters: Iterable[dict[str, str]]) -> list[StudyRef]:
        """The studies matching any of the filter sets (all pages), in UID order."""
        ...

    def fetch_study(self, study: StudyRef, store: InstanceStore) -> int:
        """Bring a study's missing instances into ``store`` and mark it complete; how many were fetched."""
        ...

    def probe(self) -> None:
        """Ask the PACS once whether a retrieval could start; raises PacsError saying why not."""
        ...

    def describe(self) -> str:
        """The service as provenance records it (no credential)."""
        ...


def too_many_studies(limit: int) -> DataError:
    """The error of a query that matches more than ``data.source.query.max_studies`` studies."""
    return DataError(
        f"the PACS query matches more than data.source.query.max_studies ({limit}) studies: narrow the "
        "query, or raise the limit."
    )
