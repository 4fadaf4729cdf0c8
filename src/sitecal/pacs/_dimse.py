"""DIMSE retrieval: C-FIND finds the studies and lists their instances, C-GET or C-MOVE fetches them.

Each worker thread keeps one association with the PACS (at most ``max_connections`` at once), reopened
when it is lost or when a study brings a storage SOP class it did not negotiate. With C-GET the
instances come back on that association; with C-MOVE the PACS sends them to the storage SCP this peer
runs on ``move_port`` as ``calling_ae``, which accepts associations from the PACS's AE title only.
Received instances go to the store as their bytes (Part 10, with the transfer syntax negotiated).

A study whose instances are all missing is fetched with one study-level request; a study resumed
half-way, one image-level request per missing instance.
"""

from __future__ import annotations

import functools
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sitecal._text import plural
from sitecal.pacs._association import (
    STORAGE_SYNTAXES,
    associate,
    check_reachable,
    no_delay,
    status_problem,
    tls_context,
)
from sitecal.pacs._credentials import Credentials
from sitecal.pacs._guard import MAX_PDU_BYTES, guard_handlers, guard_of, refused_by_guard
from sitecal.pacs._peer import PacsError, StudyRef, too_many_studies
from sitecal.pacs._store import InstanceStore
from sitecal.protocol import DimseSource

__all__ = ["DimsePeer"]

_FIND = "1.2.840.10008.5.1.4.1.2.2.1"  # Study Root Query/Retrieve Information Model - FIND
_GET = "1.2.840.10008.5.1.4.1.2.2.3"  # Study Root Query/Retrieve Information Model - GET
_MOVE = "1.2.840.10008.5.1.4.1.2.2.2"  # Study Root Query/Retrieve Information Model - MOVE
_PENDING = (0xFF00, 0xFF01)
#: Storage SOP classes one C-GET association can receive (128 presentation contexts, less FIND and GET).
_MAX_RECEIVED = 126
#: Instances a retrieval did not ask for that the PACS may send (each refused, not stored) before the
#: association is ended: a PACS sending on and on is stopped.
_MAX_UNASKED = 16
_MATCHES = "data.source.limits.matches"
#: A UID as an answer may give it (digits and dots, at most 64 characters).
_UID = re.compile(r"[0-9]+(?:\.[0-9]+)*")


@functools.cache
def _usual_classes() -> frozenset[str]:
    """The storage SOP classes a C-GET association proposes from the start (pynetdicom's usual 120)."""
    from pynetdicom import StoragePresentationContexts

    return frozenset(str(c.abstract_syntax) for c in StoragePresentationContexts)


@dataclass(frozen=True)
class _Instance:
    series_uid: str
    sop_uid: str
    sop_class: str


class DimsePeer:
    """A DIMSE peer (pynetdicom): C-FIND, then C-GET or C-MOVE, at most ``max_connections`` associations."""

    route = "dimse"

    def __init__(
        self,
        source: DimseSource,
        credentials: Credentials | None,
        resolve: Callable[[str], Path],
        store: InstanceStore | None = None,
    ) -> None:
        """``store``: where received instances go (needed to fetch, not to find)."""
        self.source, self.credentials, self.resolve = source, credentials, resolve
        self._local = threading.local()
        self._lock = threading.Lock()
        self._open: list[Any] = []
        self._server: Any = None
        self._store = store
        self._asked: dict[str, int] = {}  # SOPInstanceUID -> requests in flight asking for it
        self._unasked = 0  # instances received that no request asked for
        self.requests = 0  # C-FIND, C-GET and C-MOVE requests
        self.connections = 0  # associations opened

    # -- lifetime ---------------------------------------------------------------------------------
    def __enter__(self) -> DimsePeer:
        """For C-MOVE with a store, start listening on ``move_port``."""
        if self.source.retrieve == "move" and self._store is not None and self._server is None:
            self._server = self._storage_scp()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            opened, self._open = self._open, []
        for assoc in opened:
            if assoc.is_established:
                assoc.release()
        if self._server is not None:
            self._server.shutdown()
            self._server = None

    def probe(self) -> None:
        """Associate, ask one C-FIND that matches nothing, and (C-MOVE) check that the move port is free.

        The C-FIND names a study UID no PACS holds: it shows whether the PACS lets ``calling_ae`` query.
        """
        from pydicom.dataset import Dataset

        check_reachable(self.source, "association", resolve=self.resolve)
        identifier = Dataset()
        identifier.QueryRetrieveLevel = "STUDY"
        identifier.StudyInstanceUID = "2.25.0"
        self._find(identifier, "C-FIND (study level)", self.source.limits.matches, _MATCHES)
        if self.source.retrieve == "move":
            import socket

            with socket.socket() as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the SCP will
                try:
                    probe.bind(("", self.source.move_port or 0))
                except OSError as exc:
                    raise PacsError(
                        f"C-MOVE: cannot listen on data.source.move_port {self.source.move_port} "
                        f"({exc.strerror or exc}): choose a free port the PACS knows for "
                        f"{self.source.calling_ae}."
                    ) from None

    def describe(self) -> str:
        """``AE@host:port`` of the PACS, and how it is retrieved from."""
        peer = self.source.dimse
        return f"{peer.ae_title}@{peer.host}:{peer.port} (C-FIND, C-{self.source.retrieve.upper()})"

    def _storage_scp(self) -> Any:
        from pynetdicom import AE, AllStoragePresentationContexts, evt

        ae = AE(ae_title=self.source.calling_ae)
        for name in ("acse_timeout", "dimse_timeout", "network_timeout"):
            setattr(ae, name, self.source.timeout_s)
        ae.maximum_pdu_size = MAX_PDU_BYTES  # announced: the guard refuses a longer PDU
        for context in AllStoragePresentationContexts:
            assert context.abstract_syntax is not None
            ae.add_supported_context(context.abstract_syntax, list(STORAGE_SYNTAXES))
        ae.require_calling_aet = [self.source.dimse.ae_title]
        tls = self.source.tls
        ssl_context = None if tls is None else tls_context(tls, self.resolve, server=True)
        port = self.source.move_port
        assert port is not None  # the schema asks for it with retrieve: move
        try:
            return ae.start_server(
                ("", port),
                block=False,
                evt_handlers=[
                    (evt.EVT_C_STORE, self._on_store),
                    (evt.EVT_CONN_OPEN, no_delay),
                    *guard_handlers(
                        self.source.limits.instance_bytes, self.source.timeout_s, "limits.instance_mib"
                    ),
                ],
                ssl_context=ssl_context,
            )
        except OSError as exc:
            raise PacsError(
                f"C-MOVE: cannot listen on data.source.move_port {port} ({exc.strerror or exc}): another "
                "program holds it, or it needs privileges. Choose a free port the PACS knows for "
                f"{self.source.calling_ae}."
            ) from None

    def _on_store(self, event: Any) -> int:
        """Keep one instance received (C-GET or C-MOVE sub-operation); its C-STORE status.

        Only an instance a request in flight asked for is kept; past :data:`_MAX_UNASKED` others the
        association is ended (its guard says why).
        """
        try:
            assert self._store is not None
            sop_uid = str(event.request.AffectedSOPInstanceUID)
            with self._lock:
                asked = self._asked.get(sop_uid, 0) > 0
                self._unasked += not asked
                flood = self._unasked > _MAX_UNASKED
            if not asked:
                guard = guard_of(event.assoc)
                if flood and guard is not None:
                    guard.stop(f"more than {_MAX_UNASKED} instances that no request asked for")
                return 0xA700
            self._store.put(sop_uid, event.encoded_dataset())
        except Exception:  # any failure here is the PACS's failed sub-operation
            return 0xA700
        return 0x0000

    # -- associations -----------------------------------------------------------------------------
    def _association(self, classes: frozenset[str] = frozenset()) -> Any:
        """The thread's association, able to receive ``classes`` (C-GET), opened or reopened as needed."""
        assoc = getattr(self._local, "assoc", None)
        have: frozenset[str] = getattr(self._local, "classes", frozenset())
        if assoc is not None and assoc.is_established and classes <= have:
            return assoc
        if assoc is not None and assoc.is_established:
            assoc.release()
        get = self.source.retrieve == "get"
        wanted = (have or _usual_classes()) | classes if get else frozenset()
        if len(wanted) > _MAX_RECEIVED:  # a study of rare classes: those it needs, then the usual ones
            wanted = frozenset([*sorted(classes), *sorted(_usual_classes() - classes)][:_MAX_RECEIVED])
        with self._lock:
            self.connections += 1
        assoc = associate(
            self.source,
            self.credentials,
            self.resolve,
            what="association",
            contexts=[_FIND, _GET if get else _MOVE],
            receive=sorted(wanted),
            on_store=self._on_store if get else None,
        )
        with self._lock:
            self._open.append(assoc)
        self._local.assoc, self._local.classes = assoc, wanted
        return assoc

    def _count(self) -> None:
        with self._lock:
            self.requests += 1

    # -- C-FIND -----------------------------------------------------------------------------------
    def _find(self, identifier: Any, what: str, most: int, cap: str) -> list[Any]:
        """Every identifier a C-FIND returns; raises PacsError on a failure status or no answer.

        More than ``most`` answers (``cap``: the setting that says so) end the association.
        """
        assoc = self._association()
        self._count()
        answers = []
        started = time.monotonic()
        for status, found in assoc.send_c_find(identifier, _FIND):
            code = getattr(status, "Status", None)
            if code is None:
                raise self._lost(what, started, assoc)
            if code in _PENDING:
                if found is not None:
                    answers.append(found)
                if len(answers) > most:
                    assoc.abort()
                    self._local.assoc = None
                    raise PacsError(
                        f"{what}: {self.source.dimse.ae_title} sent more than {cap} ({most}) answers; the "
                        "association was aborted. Narrow data.source.query, or raise the limit."
                    )
            elif code != 0x0000:
                raise PacsError(f"{what}: the PACS answered {status_problem(code)}.")
        return answers

    def _lost(self, what: str, started: float, assoc: Any) -> PacsError:
        """Why a request got no final status: a bound of ours, our timeout, or the PACS ended it.

        An abort is asked again (``transient``): a PACS under load may drop an association it would
        serve a moment later; one that refuses the request aborts the next one too.
        """
        self._local.assoc = None
        peer = self.source.dimse.ae_title
        if said := refused_by_guard(assoc, "data.source"):
            return PacsError(f"{what}: {peer} at {self.source.dimse.host}:{self.source.dimse.port} {said}")
        if time.monotonic() - started >= 0.95 * self.source.timeout_s:
            return PacsError(
                f"{what}: no answer from {peer} within data.source.timeout_s ({self.source.timeout_s:g} s); "
                "the association was aborted. Check that the PACS is up, or raise the timeout."
            )
        return PacsError(
            f"{what}: {peer} aborted the association instead of answering. The PACS may not allow "
            f"{self.source.calling_ae} (data.source.calling_ae) this request: ask its administrator to "
            "register the AE title for query and retrieval.",
            transient=True,
        )

    def find_studies(self, filters: Iterable[dict[str, str]]) -> list[StudyRef]:
        """The studies matching any of the filter sets (C-FIND), in UID order."""
        from pydicom.dataset import Dataset

        found: set[str] = set()
        for search in filters:
            level = search.pop("_level", "studies")
            identifier = Dataset()
            identifier.QueryRetrieveLevel = "SERIES" if level == "series" else "STUDY"
            identifier.StudyInstanceUID = ""
            for keyword, value in search.items():
                setattr(identifier, keyword, value)
            what = f"C-FIND ({identifier.QueryRetrieveLevel.lower()} level)"
            for answer in self._find(identifier, what, self.source.limits.matches, _MATCHES):
                uid = _uid(answer, "StudyInstanceUID")
                if uid:
                    found.add(uid)
                if len(found) > self.source.query.max_studies:
                    raise too_many_studies(self.source.query.max_studies)
        return [StudyRef(uid) for uid in sorted(found)]

    def _instances(self, study: StudyRef) -> list[_Instance]:
        from pydicom.dataset import Dataset

        identifier = Dataset()
        identifier.QueryRetrieveLevel = "IMAGE"
        identifier.StudyInstanceUID = study.study_uid
        identifier.SeriesInstanceUID = ""
        identifier.SOPInstanceUID = ""
        identifier.SOPClassUID = ""
        out = set()
        most = self.source.limits.instances_per_study
        for answer in self._find(
            identifier, "C-FIND (image level)", most, "data.source.limits.instances_per_study"
        ):
            parts = [_uid(answer, k) for k in ("SeriesInstanceUID", "SOPInstanceUID", "SOPClassUID")]
            if parts[0] and parts[1] and parts[2]:
                out.add(_Instance(parts[0], parts[1], parts[2]))
        return sorted(out, key=lambda i: (i.series_uid, i.sop_uid))

    # -- C-GET / C-MOVE ---------------------------------------------------------------------------
    def fetch_study(self, study: StudyRef, store: InstanceStore) -> int:
        """Fetch a study's missing instances; how many were fetched. Raises PacsError."""
        if store is not self._store:
            raise ValueError("DimsePeer receives into the store it was made with")
        if self.source.retrieve == "move" and self._server is None:
            raise ValueError("DimsePeer fetches by C-MOVE inside its `with` block (its storage SCP)")
        listed = self._instances(study)
        if not listed:  # the study search found it: a PACS busy indexing may answer so for a moment
            raise PacsError("C-FIND (image level): the PACS lists no instance for this study", transient=True)
        missing = [i for i in listed if not store.has_instance(i.sop_uid)]
        verb = f"C-{self.source.retrieve.upper()}"
        if missing:
            classes = frozenset(i.sop_class for i in missing)
            with self._asking([i.sop_uid for i in missing]):
                if len(missing) == len(listed):
                    reports = [self._retrieve(self._identifier(study, None), classes)]
                else:
                    reports = [self._retrieve(self._identifier(study, i), classes) for i in missing]
            absent = [i for i in missing if not store.has_instance(i.sop_uid)]
            if absent:
                said = "; ".join(dict.fromkeys(r for r in reports if r))
                raise PacsError(
                    f"{verb}: {len(absent)} of {len(missing)} {plural(len(missing), 'instance')} did not "
                    "arrive" + (f" ({said})" if said else "") + self._hint(len(missing) - len(absent))
                )
        store.complete_study(study.study_uid, [i.sop_uid for i in listed])
        return len(missing)

    @contextmanager
    def _asking(self, sop_uids: list[str]) -> Iterator[None]:
        """Within the block, instances of ``sop_uids`` received are kept (C-GET or C-MOVE)."""
        with self._lock:
            for uid in sop_uids:
                self._asked[uid] = self._asked.get(uid, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                for uid in sop_uids:
                    self._asked[uid] -= 1
                    if not self._asked[uid]:
                        del self._asked[uid]

    @staticmethod
    def _identifier(study: StudyRef, instance: _Instance | None) -> Any:
        from pydicom.dataset import Dataset

        identifier = Dataset()
        identifier.StudyInstanceUID = study.study_uid
        if instance is None:
            identifier.QueryRetrieveLevel = "STUDY"
        else:
            identifier.QueryRetrieveLevel = "IMAGE"
            identifier.SeriesInstanceUID = instance.series_uid
            identifier.SOPInstanceUID = instance.sop_uid
        return identifier

    def _retrieve(self, identifier: Any, classes: frozenset[str]) -> str:
        """Send one C-GET or C-MOVE; what the PACS said when it was not a plain success ('' if it was)."""
        get = self.source.retrieve == "get"
        verb = "C-GET" if get else "C-MOVE"
        assoc = self._association(classes if get else frozenset())
        self._count()
        started = time.monotonic()
        if get:
            answers = assoc.send_c_get(identifier, _GET)
        else:
            answers = assoc.send_c_move(identifier, self.source.calling_ae, _MOVE)
        final = None
        for status, _ in answers:
            if getattr(status, "Status", None) is None:
                raise self._lost(verb, started, assoc)
            final = status
        code = int(final.Status) if final is not None else -1
        failed = int(final.get("NumberOfFailedSuboperations", 0) or 0) if final is not None else 0
        done = int(final.get("NumberOfCompletedSuboperations", 0) or 0) if final is not None else 0
        if code == 0x0000 and not failed:
            return ""
        if failed:
            total = failed + done
            return f"the PACS reports {failed} of {total} sub-operations failed, {status_problem(code)}"
        return f"the PACS answered {status_problem(code)}"

    def _hint(self, arrived: int) -> str:
        """What to check after instances did not arrive (``arrived``: how many of the study's did)."""
        if arrived:
            return (
                f". {arrived} arrived, so the PACS reaches sitecal: its log says why the others failed "
                "(often a transfer syntax it cannot send, or a sub-operation it stopped after a failure)."
            )
        if self.source.retrieve == "move":
            return (
                f". Check that the PACS knows {self.source.calling_ae} (data.source.calling_ae) as a C-MOVE "
                f"destination at this host and port {self.source.move_port}, and that the port is reachable "
                "from the PACS."
            )
        return ". Check the PACS's log for this study (a transfer syntax it cannot send, or a refusal)."


def _uid(answer: Any, keyword: str) -> str | None:
    """A UID of a C-FIND answer, stripped, when it is one (digits and dots, 64 characters at most)."""
    try:
        value = str(answer.get(keyword, "") or "").strip(" \x00")
    except Exception:  # an element pydicom cannot decode: the answer is not usable
        return None
    return value if len(value) <= 64 and _UID.fullmatch(value) else None
