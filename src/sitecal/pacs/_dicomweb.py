"""DICOMweb retrieval: QIDO-RS finds the studies, WADO-RS fetches each instance not yet in the store.

Requests go through a ``requests`` session per worker thread (at most ``max_connections`` at once), each
with the source's TLS settings and credentials, through :class:`~sitecal.pacs._http.BoundedAdapter`:
every request has a wall-clock deadline (``timeout_s``) and a byte limit (``limits``), and no redirect
is followed. QIDO-RS is paged here (``limit`` and ``offset``), each page checked to bring something
new, within ``limits.pages`` and ``limits.matches``; a WADO-RS answer is written to the store as it
arrives. STOW-RS (the report sent back) goes through ``dicomweb-client`` on the same session. Every HTTP
error becomes a message a PACS administrator can act on: the status, the server's own message (its
first line, without credentials, shortened), and what to check.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import requests

from sitecal.errors import SitecalError
from sitecal.pacs._credentials import Credentials
from sitecal.pacs._http import BoundedAdapter, DeadlinePassed, Redirected, TooLarge, bounded, read_body
from sitecal.pacs._http import server_message as _server_message
from sitecal.pacs._multipart import FirstPart
from sitecal.pacs._peer import PacsError, StudyRef, too_many_studies
from sitecal.pacs._store import InstanceStore
from sitecal.protocol import DicomwebService, DicomwebSource

__all__ = ["QIDO_PAGE", "DicomwebPeer", "PacsError", "StudyRef", "http_problem"]

_STUDY_UID = "0020000D"
_SERIES_UID = "0020000E"
_SOP_UID = "00080018"
#: Matches asked for per QIDO-RS page (``limit``); a server may send fewer, and the search goes on to
#: an empty page either way.
QIDO_PAGE = 1000
#: A UID as a QIDO-RS answer may give it, and as it goes into a WADO-RS URL (digits and dots only).
_UID = re.compile(r"[0-9]+(?:\.[0-9]+)*")
_QIDO_ACCEPT = "application/dicom+json"
_WADO_ACCEPT = 'multipart/related; type="application/dicom"; transfer-syntax=*'


def http_problem(
    exc: BaseException,
    url: str,
    what: str,
    credentials: Credentials | None = None,
    field: str = "data.source",
) -> str:
    """A message for a failed request: what failed, why, and what to check (the server by host only)."""
    host = urlsplit(url).netloc
    if isinstance(exc, TooLarge):
        setting = exc.setting or "limits"
        mib = round(exc.limit / 2**20, 3)  # as the protocol gave it
        return (
            f"{what}: {host} sent more than {field}.limits.{setting} ({mib:g} MiB) in one "
            f"answer; the request was stopped. Check that {field}.dicomweb is the DICOMweb service, or "
            "raise the limit."
        )
    if isinstance(exc, DeadlinePassed):
        return (
            f"{what}: {host} did not complete its answer within {field}.timeout_s ({exc.seconds:g} s, the "
            "limit on each request from start to end); the request was stopped. Check that the PACS is up "
            "and not overloaded, or raise the timeout."
        )
    if isinstance(exc, Redirected):
        return (
            f"{what}: {host} answered HTTP {exc.status} with a redirect to {exc.target}; sitecal follows no "
            f"redirect (it would send the query, and perhaps the credentials, where the protocol does not "
            f"say). Set {field}.dicomweb to the service's own URL."
        )
    if isinstance(exc, requests.exceptions.SSLError):
        return (
            f"{what}: TLS failure talking to {host} ({type(exc.__context__ or exc).__name__}): the server's "
            f"certificate is not trusted or does not name this host. Give the site authority as "
            f"{field}.tls.ca_file, or check the URL's host name."
        )
    if isinstance(exc, requests.exceptions.Timeout):
        return f"{what}: {host} did not answer in time ({field}.timeout_s). Check that the PACS is up."
    if isinstance(exc, requests.exceptions.ConnectionError):
        return (
            f"{what}: cannot connect to {host} (connection refused or host unreachable). Check that the "
            f"DICOMweb service is running and that {field}.dicomweb is its URL."
        )
    if isinstance(exc, requests.exceptions.HTTPError) and exc.response is not None:
        status = exc.response.status_code
        reason = re.sub(r"[^A-Za-z0-9 '-]", "", exc.response.reason or "")[:40]
        said = _server_message(exc.response, credentials)
        hint = {
            401: "the server refused the credentials: check SITECAL_PACS_USERNAME / SITECAL_PACS_PASSWORD "
            f"or {field}.credentials_file",
            403: "the credentials are not allowed this request: ask the PACS administrator for read access",
            404: f"not found: check that {field}.dicomweb is the DICOMweb root (e.g. .../dicom-web)",
        }.get(status, "the server failed the request" if status >= 500 else "the server refused the request")
        return f"{what}: HTTP {status} {reason}{said}; {hint}."
    return f"{what}: {type(exc).__name__} talking to {host}."


class DicomwebPeer:
    """A DICOMweb service: find studies (QIDO-RS), list and fetch their instances (QIDO-RS, WADO-RS).

    ``field``: the protocol field of the service, for messages (``data.source``, ``report.send_to``).
    """

    route = "dicomweb"

    def __init__(
        self,
        source: DicomwebService,
        credentials: Credentials | None,
        resolve: Callable[[str], Path],
        field: str = "data.source",
    ) -> None:
        self.source, self.credentials, self.resolve, self.field = source, credentials, resolve, field
        self.limits = source.limits
        self._local = threading.local()
        self._lock = threading.Lock()
        self.requests = 0
        self.connections = 0  # HTTP sessions (one a worker thread)
        self._sessions: list[requests.Session] = []

    def __enter__(self) -> DicomwebPeer:
        return self

    def __exit__(self, *exc: object) -> None:
        for session in self._sessions:
            session.close()

    def probe(self) -> None:
        """One QIDO-RS study search limited to one answer (one page)."""
        self._page("studies", {}, 0, 1, "QIDO-RS study search", (_STUDY_UID,))

    def describe(self) -> str:
        """The service URL (the protocol holds no user in it)."""
        return self.source.dicomweb

    def _count(self) -> None:
        with self._lock:
            self.requests += 1

    def _session(self) -> requests.Session:
        session: requests.Session | None = getattr(self._local, "session", None)
        if session is None:
            session = requests.Session()
            with self._lock:
                self._sessions.append(session)
                self.connections += 1
            tls = self.source.tls
            ca_file = None if tls is None or tls.ca_file is None else str(self.resolve(tls.ca_file))
            adapter = BoundedAdapter(self.source.timeout_s, self._count, ca_file)
            session.mount("http://", adapter)
            session.mount("https://", adapter)
            if tls is not None and tls.cert_file is not None and tls.key_file is not None:
                session.cert = (str(self.resolve(tls.cert_file)), str(self.resolve(tls.key_file)))
            creds = self.credentials
            if creds is not None and creds.token is not None:
                session.headers["Authorization"] = f"Bearer {creds.token}"
            elif creds is not None and creds.username is not None and creds.password is not None:
                session.auth = (creds.username, creds.password)
            self._local.session = session
        return session

    def _bounded(self, limit: int, setting: str) -> AbstractContextManager[None]:
        return bounded(self.source.timeout_s, limit, setting)

    def _call(self, what: str, func: Callable[[], Any]) -> Any:
        """``func()``, its failures as :class:`PacsError` saying what to check."""
        try:
            return func()
        except (PacsError, SitecalError):  # already a message (a limit of ours, the store's disk)
            raise
        except (requests.RequestException, OSError) as exc:
            problem = http_problem(exc, self.source.dicomweb, what, self.credentials, self.field)
            raise PacsError(problem, transient=_transient(exc), fatal=isinstance(exc, Redirected)) from None
        except (ValueError, RecursionError, TypeError, KeyError, AttributeError) as exc:  # a malformed answer
            raise PacsError(
                f"{what}: the server's answer could not be read ({type(exc).__name__})."
            ) from None

    # -- QIDO-RS ----------------------------------------------------------------------------------
    def _page(
        self, path: str, filters: dict[str, str], offset: int, limit: int, what: str, tags: tuple[str, ...]
    ) -> list[tuple[str | None, ...]]:
        """One QIDO-RS page: per match, the first value of each of ``tags`` (None when absent)."""
        url = f"{self.source.dicomweb}/{path}"
        params = {**filters, "limit": str(limit), "offset": str(offset)}

        def ask() -> list[tuple[str | None, ...]]:
            with self._bounded(self.limits.answer_bytes, "answer_mib"):
                response = self._session().get(url, params=params, headers={"Accept": _QIDO_ACCEPT})
                response.raise_for_status()
            return _matches(response.content, tags)

        return self._call(what, ask)  # type: ignore[no-any-return]

    def _search(
        self, path: str, filters: dict[str, str], what: str, tags: tuple[str, ...], most: int, cap: str
    ) -> Iterator[tuple[str, ...]]:
        """Every match of a QIDO-RS search, page by page: the values of ``tags``, each a valid UID.

        The first tag names a match; a page that names none not seen before (a server that ignores
        ``offset`` sends the first page again) ends the search with an error, as do more than
        ``limits.pages`` pages and more than ``most`` matches (``cap``: the setting that says so).
        """
        seen: set[str] = set()
        offset = 0
        for page in range(self.limits.pages + 1):
            if page == self.limits.pages:
                raise PacsError(
                    f"{what}: the server sent {page} pages and has not finished ({self.field}.limits.pages); "
                    f"narrow {self.field}.query, or raise the limit."
                )
            matches = self._page(path, filters, offset, QIDO_PAGE, what, tags)
            if not matches:
                return
            valid = [cast(tuple[str, ...], m) for m in matches if all(v and _UID.fullmatch(v) for v in m)]
            new = {m[0] for m in valid if m[0] not in seen}
            if not new:
                raise PacsError(
                    f"{what}: page {page + 1} (offset {offset}) brought no match not already seen: the "
                    "server sent a page again (it may ignore the QIDO-RS offset parameter) or answers "
                    "without UIDs. Ask the PACS administrator to check its DICOMweb paging."
                )
            if len(seen) + len(new) > most:
                raise PacsError(
                    f"{what}: more than {cap} ({most}) matches; narrow {self.field}.query, or raise the "
                    "limit."
                )
            seen |= new
            offset += len(matches)
            yield from valid

    def find_studies(self, filters: Iterable[dict[str, str]]) -> list[StudyRef]:
        """The studies matching any of the filter sets (QIDO-RS, all pages), in UID order."""
        found: set[str] = set()
        limit = self.source.query.max_studies if isinstance(self.source, DicomwebSource) else None
        matches_cap = f"{self.field}.limits.matches"
        for search in filters:
            level = search.pop("_level", "studies")
            tags: tuple[str, ...]
            if level == "series":
                what, path, tags = "QIDO-RS series search", "series", (_SERIES_UID, _STUDY_UID)
            else:
                what, path, tags = "QIDO-RS study search", "studies", (_STUDY_UID,)
            for match in self._search(path, search, what, tags, self.limits.matches, matches_cap):
                found.add(match[-1])
                if limit is not None and len(found) > limit:
                    raise too_many_studies(limit)
        return [StudyRef(uid) for uid in sorted(found)]

    def instances(self, study: StudyRef) -> list[tuple[str, str]]:
        """(SeriesInstanceUID, SOPInstanceUID) of every instance of a study (QIDO-RS)."""
        found = self._search(
            f"studies/{study.study_uid}/instances",
            {},
            "QIDO-RS instance search",
            (_SOP_UID, _SERIES_UID),
            self.limits.instances_per_study,
            f"{self.field}.limits.instances_per_study",
        )
        return sorted({(series, sop) for sop, series in found})

    # -- STOW-RS ----------------------------------------------------------------------------------
    def store(self, dataset: Any) -> Any:
        """STOW-RS one instance; the server's reply (a dataset of referenced and failed instances)."""
        from dicomweb_client.api import DICOMwebClient

        client = DICOMwebClient(self.source.dicomweb, session=self._session())
        client.set_http_retry_params(retry=False)

        def send() -> Any:
            with self._bounded(self.limits.answer_bytes, "answer_mib"):
                return client.store_instances([dataset])

        return self._call("STOW-RS", send)

    # -- WADO-RS ----------------------------------------------------------------------------------
    def fetch_study(self, study: StudyRef, store: InstanceStore) -> int:
        """Fetch a study's missing instances (one WADO-RS request each); how many were fetched."""
        instances = self.instances(study)
        if not instances:  # the study search found it: a PACS busy indexing may answer so for a moment
            raise PacsError("the PACS lists no instance for this study", transient=True)
        fetched = 0
        for series_uid, sop_uid in instances:
            if not store.has_instance(sop_uid):
                self.fetch(study, series_uid, sop_uid, store)
                fetched += 1
        store.complete_study(study.study_uid, [sop for _, sop in instances])
        return fetched

    def fetch(self, study: StudyRef, series_uid: str, sop_uid: str, store: InstanceStore) -> str:
        """Bring one instance into ``store`` as the server sends it (WADO-RS, Part 10); its object hash.

        The answer is written to the store's ``incoming/`` as it arrives, within ``limits.instance_mib``.
        """
        url = f"{self.source.dicomweb}/studies/{study.study_uid}/series/{series_uid}/instances/{sop_uid}"
        what = "WADO-RS instance retrieval"
        with store.incoming() as incoming:

            def receive() -> None:
                with self._bounded(self.limits.instance_bytes, "instance_mib"):
                    response = self._session().get(url, headers={"Accept": _WADO_ACCEPT}, stream=True)
                    response.raise_for_status()
                    part = FirstPart(response.headers.get("content-type", ""), incoming.write)
                    read_body(response, self.limits.instance_bytes, sink=part.feed)
                    part.finish()

            self._call(what, receive)
            if incoming.head(132)[128:132] != b"DICM":
                raise PacsError(f"{what}: the instance is not a DICOM Part-10 file (no 'DICM' at byte 128).")
            return store.put_incoming(sop_uid, incoming)


def _matches(body: bytes, tags: tuple[str, ...]) -> list[tuple[str | None, ...]]:
    """The QIDO-RS JSON of ``body`` as the first value of each of ``tags`` per match.

    Each object is reduced as it is parsed (an attribute to its values, a match to the wanted values),
    so a page's memory is that of its UIDs, not of its JSON objects. Raises ValueError on anything but
    a JSON list of matches (RecursionError on nesting past Python's limit).
    """

    def reduce(obj: dict[str, Any]) -> Any:
        if "vr" in obj:  # an attribute: its values
            return obj.get("Value")
        return tuple(_first(obj.get(tag)) for tag in tags)  # a match (or a sequence item)

    if not body.strip():  # HTTP 204, or an empty body: no match
        return []
    answer = json.loads(body, object_hook=reduce)
    if not isinstance(answer, list) or not all(isinstance(m, tuple) for m in answer):
        raise ValueError("not a QIDO-RS answer (a JSON list of matches)")
    return answer


def _first(values: Any) -> str | None:
    """The first value of an attribute's values when it is text (a UID), stripped; else None."""
    if isinstance(values, list) and values and isinstance(values[0], str):
        value = values[0].strip(" \x00")
        return value if len(value) <= 64 else None
    return None


def _transient(exc: BaseException) -> bool:
    """Whether asking again may succeed.

    Yes for a dropped or reset connection, a body cut short, a server that says it is busy or that a
    gateway failed (HTTP 502, 503, 504); no for a timeout or a deadline passed (asking again costs as
    long again), an answer past its limit, a redirect, a TLS failure, a refused credential or a missing
    resource.
    """
    if isinstance(exc, TooLarge | DeadlinePassed | Redirected):
        return False
    if isinstance(exc, requests.exceptions.SSLError | requests.exceptions.Timeout):
        return False
    if isinstance(exc, requests.exceptions.ConnectionError | requests.exceptions.ChunkedEncodingError):
        return True
    if isinstance(exc, requests.exceptions.HTTPError) and exc.response is not None:
        return exc.response.status_code in (502, 503, 504)
    return isinstance(exc, ConnectionResetError)
