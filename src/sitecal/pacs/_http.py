"""HTTP to a server that is not trusted to end what it sends: a byte limit, a deadline, no redirect.

Every request of a DICOMweb peer goes through a :class:`BoundedAdapter` inside a :func:`bounded` block:

- the block's deadline is wall-clock (``timeout_s`` for the whole request: connection, headers and
  body). A socket timeout alone restarts with every byte, so a server sending one byte a second would
  never be cut; here a timer shuts the request's sockets down when the deadline passes, which ends any
  read in progress, and the request fails with :class:`DeadlinePassed`;
- a body is read in chunks and counted (after decompression) against the block's limit, never read
  whole first: past it the connection is closed and the request fails with :class:`TooLarge`. An error
  answer (HTTP 400 and above) is read to :data:`ERROR_BODY_BYTES` only;
- a redirect is refused (:class:`Redirected`), whatever its target. A DICOMweb service does not
  redirect its API; a redirect comes from a proxy's login page or a service that moved, and following it
  would send the query (dates, accession numbers) and, to the same host, the credentials somewhere the
  protocol does not name. Refusing every one is simpler to reason about than a same-host rule, and the
  message says which URL to set instead.

:func:`server_message` is what of a server's error answer may be shown: its first line, with the
credentials removed, control characters replaced, identifiers scrubbed, cut to 200 characters.
"""

from __future__ import annotations

import base64
import logging
import re
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote, unquote, urljoin, urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from sitecal._scrub import safe_text
from sitecal.pacs._credentials import Credentials

__all__ = [
    "ERROR_BODY_BYTES",
    "BoundedAdapter",
    "DeadlinePassed",
    "Redirected",
    "TooLarge",
    "bounded",
    "read_body",
    "redact",
    "server_message",
]

#: Bytes of an error answer read (its message is shown cut to 200 characters; the rest is not read).
ERROR_BODY_BYTES = 4096
#: Bytes read at a time from a body (the count is checked between chunks).
CHUNK_BYTES = 1 << 20
#: Characters of a server's message shown.
MESSAGE_CHARS = 200

_local = threading.local()

# urllib3 logs what it could not parse of an answer (a header block cut short, with the server's bytes
# and a traceback) as a warning: text the server chose, on the console. sitecal's own message names the
# failure (the deadline, the limit), so urllib3's lines would only repeat it, raw.
logging.getLogger("urllib3").setLevel(logging.CRITICAL)
#: An Authorization header echoed (``Authorization: Basic c2l0...``): its value, to the end of the line.
_AUTHORIZATION = re.compile(r"(?i)(authorization[\"']?\s*[:=]\s*[\"']?)[^\r\n\"']+")
#: ``Basic <base64>`` or ``Bearer <token>`` elsewhere: a value that is not a plain word.
_SCHEME_VALUE = re.compile(
    r"(?i)\b(basic|bearer)(?:\s+|%20|\+)(?=[A-Za-z0-9+/=._~%-]*[0-9+/=._~%-])[A-Za-z0-9+/=._~%-]{8,}"
)


class TooLarge(requests.RequestException):
    """An answer went past the byte limit of its request.

    ``limit``: the limit, in bytes; ``setting``: the protocol setting that gave it (``answer_mib``).
    """

    def __init__(self, limit: int, setting: str = "") -> None:
        super().__init__(f"answer larger than {limit} bytes")
        self.limit, self.setting = limit, setting


class DeadlinePassed(requests.RequestException):
    """The request had not ended when its deadline passed (``seconds``: the deadline)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"no complete answer within {seconds:g} s")
        self.seconds = seconds


class Redirected(requests.RequestException):
    """The server answered with a redirect, which is not followed.

    ``status``: its HTTP status; ``target``: where it pointed, in words (another host by name, plain
    http, or the same host), never its path or query.
    """

    def __init__(self, status: int, target: str) -> None:
        super().__init__(f"HTTP {status} redirect to {target}")
        self.status, self.target = status, target


class _Watch:
    """A request's deadline: when it passes, the sockets the request opened or used are shut down.

    ``shutdown`` (not ``close``) is safe from another thread: it ends a ``recv`` blocked in the request's
    thread, which then fails (or sees the end of the stream) and finds ``expired`` set.
    """

    def __init__(self, seconds: float, limit: int, setting: str) -> None:
        self.seconds, self.limit, self.setting = seconds, limit, setting
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            expired = self.expired
        if expired:
            _shut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            _shut(sock)

    def cancel(self) -> None:
        self._timer.cancel()


def _shut(sock: socket.socket) -> None:
    try:  # socket.socket's own shutdown: an SSLSocket's would also drop its TLS state under a reader
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except (OSError, TypeError):  # already closed, or not a socket: nothing left to end
        pass


def _watch_socket(sock: Any) -> None:
    watch: _Watch | None = getattr(_local, "watch", None)
    if watch is not None and isinstance(sock, socket.socket):
        watch.watch(sock)


@contextmanager
def bounded(seconds: float, limit: int, setting: str = "") -> Iterator[None]:
    """Run the requests of this thread inside the block under one deadline and a byte limit per answer.

    ``setting`` names the limit in a :class:`TooLarge` raised in the block.

    Raises
    ------
    DeadlinePassed
        When the deadline passed before the block ended (whatever the request then raised).
    """
    watch = _Watch(seconds, limit, setting)
    outer, _local.watch = getattr(_local, "watch", None), watch
    try:
        yield
    except TooLarge as exc:
        exc.setting = exc.setting or setting
        raise
    except Exception as exc:  # whatever a read cut short raised (a closed stream, a truncated answer)
        if watch.expired:
            raise DeadlinePassed(seconds) from exc
        raise
    finally:
        watch.cancel()
        _local.watch = outer
    if watch.expired:  # a body cut by the deadline may look complete (a server closing the connection)
        raise DeadlinePassed(seconds)


def _limit() -> int:
    watch: _Watch | None = getattr(_local, "watch", None)
    if watch is None:
        raise RuntimeError("a PACS request outside sitecal.pacs._http.bounded")
    return watch.limit


# -- connections that report their sockets to the request's deadline ---------------------------------
class _Connection(HTTPConnection):
    def _new_conn(self) -> socket.socket:
        sock = super()._new_conn()
        _watch_socket(sock)  # before the TLS handshake, which a slow server could also drag out
        return sock

    def request(self, *args: Any, **kwargs: Any) -> None:
        _watch_socket(self.sock)  # a connection kept from an earlier request
        super().request(*args, **kwargs)


class _TlsConnection(HTTPSConnection):
    def _new_conn(self) -> socket.socket:
        sock = super()._new_conn()
        _watch_socket(sock)
        return sock

    def request(self, *args: Any, **kwargs: Any) -> None:
        _watch_socket(self.sock)
        super().request(*args, **kwargs)


class _Pool(HTTPConnectionPool):
    ConnectionCls = _Connection


class _TlsPool(HTTPSConnectionPool):
    ConnectionCls = _TlsConnection


_POOLS = {"http": _Pool, "https": _TlsPool}


class BoundedAdapter(HTTPAdapter):
    """An adapter that bounds every answer, refuses redirects, and counts the requests it sends.

    ``timeout``: the socket timeout (connect, and each read); ``ca_file``, when given, is the authority
    every request verifies against (set here because requests lets ``REQUESTS_CA_BUNDLE`` in the
    environment override a session's own ``verify``). A request must run inside :func:`bounded`, whose
    byte limit applies to the body; with ``stream=True`` the caller reads the body with
    :func:`read_body` inside the same block.
    """

    def __init__(self, timeout: float, counter: Callable[[], None], ca_file: str | None = None) -> None:
        super().__init__(max_retries=0)
        self._timeout, self._counter, self._ca_file = timeout, counter, ca_file

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _POOLS

    def proxy_manager_for(self, proxy: str, **kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **kwargs)
        manager.pool_classes_by_scheme = _POOLS
        return manager

    def send(self, request: Any, stream: bool = False, **kwargs: Any) -> Any:  # type: ignore[override]
        limit = _limit()
        if kwargs.get("timeout") is None:
            kwargs["timeout"] = self._timeout
        if self._ca_file is not None:
            kwargs["verify"] = self._ca_file
        self._counter()
        response = super().send(request, stream=True, **kwargs)
        if 300 <= response.status_code < 400:
            response.close()
            raise Redirected(response.status_code, _target(request.url, response.headers.get("location")))
        if response.status_code >= 400:
            read_body(response, ERROR_BODY_BYTES, cut=True)
        elif not stream:
            read_body(response, limit)
        return response


def _target(url: str, location: str | None) -> str:
    """Where a redirect points, in words: never its path or query, and a host name only if it is one."""
    if not location:
        return "nowhere (no Location header)"
    here = urlsplit(url)
    try:
        there = urlsplit(urljoin(url, location))
        host = there.hostname or ""
    except ValueError:
        return "a URL that cannot be read"
    if there.scheme == "http" and here.scheme == "https":
        return "plain http"
    if host == (here.hostname or ""):
        return "another URL on the same server"
    if re.fullmatch(r"[A-Za-z0-9.-]{1,100}", host):
        return f"another host ({host})"
    return "another host"


def read_body(
    response: requests.Response,
    limit: int,
    *,
    cut: bool = False,
    sink: Callable[[bytes], bool | None] | None = None,
) -> int:
    """Read ``response``'s body in chunks, at most ``limit`` bytes; how many were read.

    The chunks go to ``sink`` when given (which returns True when it needs no more: the rest is not
    read), else they become ``response.content``. Past ``limit`` the connection is closed and
    :class:`TooLarge` raised, or (``cut``) the body kept so far is what remains.
    """
    declared = response.headers.get("content-length", "")
    if not cut and declared.isdigit() and int(declared) > limit:
        response.close()
        raise TooLarge(limit)
    kept = bytearray()
    total = 0
    for chunk in response.iter_content(CHUNK_BYTES):
        total += len(chunk)
        if total > limit:
            if cut:
                kept += chunk[: len(chunk) - (total - limit)]
                break
            response.close()
            raise TooLarge(limit)
        if sink is None:
            kept += chunk
        elif sink(chunk):
            break
    response.close()  # releases the connection when the body was read to its end; else drops it
    if sink is None:
        response._content = bytes(kept)
        response._content_consumed = True
    return min(total, limit)


def redact(text: str, credentials: Credentials | None) -> str:
    """``text`` without the credentials in any form a server might echo them in.

    The text is percent-decoded first. The password, the token and the username (3 characters or
    more), as given and URL-encoded; the
    base64 of ``username:password`` (HTTP basic, standard and URL-safe alphabets, padded or not); an
    ``Authorization`` header's value; and a value after ``Basic`` or ``Bearer`` that looks like one
    (8 characters or more with a digit or a sign of base64 or a JWT), whoever's it is.
    """
    text = unquote(text)  # a secret percent-encoded, in any of the ways a server may encode it
    text = _AUTHORIZATION.sub(r"\1<hidden>", text)
    text = _SCHEME_VALUE.sub(r"\1 <hidden>", text)
    for secret in sorted(_secrets(credentials), key=len, reverse=True):
        text = text.replace(secret, "<hidden>")
    return text


def _secrets(credentials: Credentials | None) -> set[str]:
    if credentials is None:
        return set()
    values = {credentials.password, credentials.token}
    if credentials.username is not None and len(credentials.username) >= 3:
        values.add(credentials.username)
    if credentials.username is not None and credentials.password is not None:
        pair = f"{credentials.username}:{credentials.password}".encode()
        for encoded in (base64.b64encode(pair), base64.urlsafe_b64encode(pair)):
            values |= {encoded.decode(), encoded.decode().rstrip("=")}
    values |= {quote(v, safe="") for v in values if v}
    return {v for v in values if v}


def server_message(response: requests.Response, credentials: Credentials | None) -> str:
    """The first line of a server's error answer, safe to show, quoted; '' when there is none.

    Credentials removed first (so that none is left half-cut), then control characters, anything like a
    UID or a path (:func:`sitecal._scrub.safe_text`), then cut to :data:`MESSAGE_CHARS` characters.
    """
    try:
        content = response.content or b""
    except (requests.RequestException, RuntimeError):  # a body not read, or no longer readable
        content = b""
    text = redact(content[:ERROR_BODY_BYTES].decode("utf-8", "replace"), credentials)
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    line = safe_text("".join(ch if ch.isprintable() else " " for ch in line), limit=MESSAGE_CHARS)
    return f': "{line}"' if line else ""
