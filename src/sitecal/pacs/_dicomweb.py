"""DICOMweb retrieval: QIDO-RS finds the studies, WADO-RS fetches each instance not yet in the store.

Requests go through ``dicomweb-client`` on a ``requests`` session per worker thread (at most
``max_connections`` at once), each with the source's timeout, TLS settings and credentials. Every HTTP
error becomes a message a PACS administrator can act on: the status, the server's own message (its first
line, shortened), and what to check.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable
from io import BytesIO
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter

from sitecal._scrub import safe_text
from sitecal.pacs._credentials import Credentials
from sitecal.pacs._peer import PacsError, StudyRef, too_many_studies
from sitecal.pacs._store import InstanceStore
from sitecal.protocol._pacs import DicomwebService, DicomwebSource

__all__ = ["DicomwebPeer", "PacsError", "StudyRef", "http_problem"]

_STUDY_UID = "0020000D"
_SERIES_UID = "0020000E"
_SOP_UID = "00080018"


class _Counted(HTTPAdapter):
    """An adapter with a default timeout that counts the requests it sends.

    ``ca_file``, when given, is the authority every request verifies against: set here because requests
    lets ``REQUESTS_CA_BUNDLE`` in the environment override a session's own ``verify``.
    """

    def __init__(self, timeout: float, counter: Callable[[], None], ca_file: str | None = None) -> None:
        super().__init__(max_retries=0)
        self._timeout, self._counter, self._ca_file = timeout, counter, ca_file

    def send(self, request: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        if kwargs.get("timeout") is None:
            kwargs["timeout"] = self._timeout
        if self._ca_file is not None:
            kwargs["verify"] = self._ca_file
        self._counter()
        return super().send(request, **kwargs)


def _server_message(response: requests.Response) -> str:
    """The first line of the server's answer, shortened, printable, with anything like a UID removed."""
    try:
        text = response.text
    except (UnicodeDecodeError, requests.RequestException):
        return ""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    line = safe_text("".join(ch if ch.isprintable() else " " for ch in line), limit=200)
    return f': "{line}"' if line else ""


def http_problem(exc: BaseException, url: str, what: str) -> str:
    """A message for a failed request: what failed, why, and what to check."""
    host = urlsplit(url).netloc
    if isinstance(exc, requests.exceptions.SSLError):
        return (
            f"{what}: TLS failure talking to {host} ({type(exc.__context__ or exc).__name__}): the server's "
            "certificate is not trusted or does not name this host. Give the site authority as "
            "data.source.tls.ca_file, or check the URL's host name."
        )
    if isinstance(exc, requests.exceptions.Timeout):
        return f"{what}: {host} did not answer in time (data.source.timeout_s). Check that the PACS is up."
    if isinstance(exc, requests.exceptions.ConnectionError):
        return (
            f"{what}: cannot connect to {host} (connection refused or host unreachable). Check that the "
            "DICOMweb service is running and that data.source.dicomweb is its URL."
        )
    if isinstance(exc, requests.exceptions.HTTPError) and exc.response is not None:
        status = exc.response.status_code
        reason = exc.response.reason or ""
        said = _server_message(exc.response)
        hint = {
            401: "the server refused the credentials: check SITECAL_PACS_USERNAME / SITECAL_PACS_PASSWORD "
            "or data.source.credentials_file",
            403: "the credentials are not allowed this request: ask the PACS administrator for read access",
            404: "not found: check that data.source.dicomweb is the DICOMweb root (e.g. .../dicom-web)",
        }.get(status, "the server failed the request" if status >= 500 else "the server refused the request")
        return f"{what}: HTTP {status} {reason}{said}; {hint}."
    return f"{what}: {type(exc).__name__} talking to {host}."


class DicomwebPeer:
    """A DICOMweb service: find studies (QIDO-RS), list and fetch their instances (QIDO-RS, WADO-RS)."""

    route = "dicomweb"

    def __init__(
        self,
        source: DicomwebService,
        credentials: Credentials | None,
        resolve: Callable[[str], Path],
    ) -> None:
        self.source, self.credentials, self.resolve = source, credentials, resolve
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
        """One QIDO-RS study search limited to one answer."""
        client = self._client()
        self._call("QIDO-RS study search", lambda: client.search_for_studies(limit=1))

    def describe(self) -> str:
        """The service URL (the protocol holds no user in it)."""
        return self.source.dicomweb

    def _count(self) -> None:
        with self._lock:
            self.requests += 1

    def _client(self) -> Any:
        client = getattr(self._local, "client", None)
        if client is None:
            from dicomweb_client.api import DICOMwebClient

            session = requests.Session()
            with self._lock:
                self._sessions.append(session)
                self.connections += 1
            tls = self.source.tls
            ca_file = None if tls is None or tls.ca_file is None else str(self.resolve(tls.ca_file))
            adapter = _Counted(self.source.timeout_s, self._count, ca_file)
            session.mount("http://", adapter)
            session.mount("https://", adapter)
            if tls is not None and tls.cert_file is not None and tls.key_file is not None:
                session.cert = (str(self.resolve(tls.cert_file)), str(self.resolve(tls.key_file)))
            creds = self.credentials
            if creds is not None and creds.token is not None:
                session.headers["Authorization"] = f"Bearer {creds.token}"
            elif creds is not None and creds.username is not None and creds.password is not None:
                session.auth = (creds.username, creds.password)
            client = DICOMwebClient(self.source.dicomweb, session=session)
            client.set_http_retry_params(retry=False)
            self._local.client = client
        return client

    def _call(self, what: str, func: Callable[[], Any]) -> Any:
        try:
            return func()
        except (requests.RequestException, OSError) as exc:
            problem = http_problem(exc, self.source.dicomweb, what)
            raise PacsError(problem, transient=_transient(exc)) from None
        except ValueError as exc:  # a malformed answer (JSON, multipart, DICOM)
            raise PacsError(
                f"{what}: the server's answer could not be read ({type(exc).__name__})."
            ) from None

    def find_studies(self, filters: Iterable[dict[str, str]]) -> list[StudyRef]:
        """The studies matching any of the filter sets (QIDO-RS, all pages), in UID order."""
        found: set[str] = set()
        client = self._client()
        for search in filters:
            level = search.pop("_level", "studies")
            search_for = client.search_for_series if level == "series" else client.search_for_studies
            answer = self._call(
                f"QIDO-RS {'series' if level == 'series' else 'study'} search",
                functools.partial(search_for, search_filters=search, get_remaining=True),
            )
            for item in answer:
                uid = _value(item, _STUDY_UID)
                if uid:
                    found.add(uid)
                limit = self.source.query.max_studies if isinstance(self.source, DicomwebSource) else None
                if limit is not None and len(found) > limit:
                    raise too_many_studies(limit)
        return [StudyRef(uid) for uid in sorted(found)]

    def instances(self, study: StudyRef) -> list[tuple[str, str]]:
        """(SeriesInstanceUID, SOPInstanceUID) of every instance of a study (QIDO-RS)."""
        client = self._client()
        answer = self._call(
            "QIDO-RS instance search",
            lambda: client.search_for_instances(study_instance_uid=study.study_uid, get_remaining=True),
        )
        out = []
        for item in answer:
            series, sop = _value(item, _SERIES_UID), _value(item, _SOP_UID)
            if series and sop:
                out.append((series, sop))
        return sorted(set(out))

    def store(self, dataset: Any) -> Any:
        """STOW-RS one instance; the server's reply (a dataset of referenced and failed instances)."""
        client = self._client()
        return self._call("STOW-RS", lambda: client.store_instances([dataset]))

    def fetch_study(self, study: StudyRef, store: InstanceStore) -> int:
        """Fetch a study's missing instances (one WADO-RS request each); how many were fetched."""
        instances = self.instances(study)
        if not instances:  # the study search found it: a PACS busy indexing may answer so for a moment
            raise PacsError("the PACS lists no instance for this study", transient=True)
        fetched = 0
        for series_uid, sop_uid in instances:
            if not store.has_instance(sop_uid):
                store.put(sop_uid, self.fetch(study, series_uid, sop_uid))
                fetched += 1
        store.complete_study(study.study_uid, [sop for _, sop in instances])
        return fetched

    def fetch(self, study: StudyRef, series_uid: str, sop_uid: str) -> bytes:
        """One instance as Part-10 bytes (WADO-RS, the server's transfer syntax)."""
        client = self._client()
        dataset = self._call(
            "WADO-RS instance retrieval",
            lambda: client.retrieve_instance(
                study.study_uid, series_uid, sop_uid, media_types=(("application/dicom", "*"),)
            ),
        )
        buffer = BytesIO()
        try:
            dataset.save_as(buffer, enforce_file_format=True)
        except (ValueError, AttributeError, TypeError) as exc:
            raise PacsError(
                f"WADO-RS instance retrieval: the instance is not valid DICOM ({exc!r:.120})."
            ) from None
        return buffer.getvalue()


def _transient(exc: BaseException) -> bool:
    """Whether asking again may succeed.

    Yes for a dropped or reset connection, a body cut short, a server that says it is busy or that a
    gateway failed (HTTP 502, 503, 504); no for a timeout (asking again costs as long again), a TLS
    failure, a refused credential or a missing resource.
    """
    if isinstance(exc, requests.exceptions.SSLError | requests.exceptions.Timeout):
        return False
    if isinstance(exc, requests.exceptions.ConnectionError | requests.exceptions.ChunkedEncodingError):
        return True
    if isinstance(exc, requests.exceptions.HTTPError) and exc.response is not None:
        return exc.response.status_code in (502, 503, 504)
    return isinstance(exc, ConnectionResetError)


def _value(item: dict[str, Any], tag: str) -> str | None:
    """A QIDO-RS JSON attribute's first value, or None."""
    values = (item.get(tag) or {}).get("Value") or []
    return str(values[0]) if values else None
