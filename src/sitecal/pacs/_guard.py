"""Bounds on what a DIMSE peer sends on one association: PDU size, bytes and time per message.

pynetdicom reads a PDU whole, of whatever length its header declares (up to 4 GiB), assembles a
message from any number of PDUs, and reads with no socket timeout once the association is up (its
``network_timeout`` restarts with every byte). A :class:`Guard`, installed on an association when its
connection opens (an ``EVT_CONN_OPEN`` handler), reads the socket in its place and refuses:

- a PDU longer than :data:`MAX_PDU_BYTES`, the most we announce we accept (a peer must keep to it);
- a message (a C-FIND answer, a C-STORE's instance) past its byte limit, counted as it arrives;
- a message still incomplete ``timeout_s`` after the last sign of progress (a PDU we sent, a message
  received): a peer trickling one byte at a time is cut, one answering steadily is not.

Refusing ends the connection (pynetdicom aborts the association) and wakes the thread waiting for the
answer at once; :attr:`Guard.problem` then says what happened, for the error message. A count of
answers is bounded by the caller, which sees each one.
"""

from __future__ import annotations

import socket
import threading
import time
import weakref
from typing import Any

__all__ = ["MAX_PDU_BYTES", "Guard", "guard_handlers", "guard_of", "install_guard", "refused_by_guard"]

#: Largest PDU we accept, announced as our maximum PDU length (pynetdicom's own default is 16 KiB; a
#: larger one saves little past a few hundred KiB, and bounds what one read may ask for).
MAX_PDU_BYTES = 1 << 20
#: Bytes asked of the socket per read.
_READ_BYTES = 65536

_guards: weakref.WeakKeyDictionary[Any, Guard] = weakref.WeakKeyDictionary()


class Guard:
    """One association's bounds (see the module docstring); thread-safe where it needs to be.

    ``message_bytes``: the most one message may hold (``setting``: the protocol setting that gives it,
    e.g. ``limits.answer_mib``); ``timeout_s``: the longest a message may take after the last sign of
    progress. ``problem``: what the peer did, once refused; ``setting``: what to raise, if anything.
    """

    def __init__(self, assoc: Any, message_bytes: int, timeout_s: float, setting: str) -> None:
        self._assoc = assoc
        self.message_bytes, self.timeout_s, self._limit_setting = message_bytes, timeout_s, setting
        self.problem: str | None = None
        self.setting = ""
        self._received = 0  # bytes of the message being received
        self._deadline = time.monotonic() + timeout_s
        self._lock = threading.Lock()

    def progress(self, *_: Any) -> None:
        """A sign of progress (a PDU sent): the next message has ``timeout_s`` from now."""
        self._deadline = time.monotonic() + self.timeout_s

    def message_received(self, *_: Any) -> None:
        """A whole message arrived: the next one is counted from zero, with ``timeout_s`` from now."""
        self._received = 0
        self.progress()

    def stop(self, problem: str, setting: str = "") -> None:
        """End the association at the next read (a caller's bound, e.g. too many instances sent)."""
        with self._lock:
            if self.problem is None:
                self.problem, self.setting = problem, setting

    def _refuse(self, problem: str, setting: str = "") -> OSError:
        self.stop(problem, setting)
        queue = getattr(getattr(self._assoc, "dimse", None), "msg_queue", None)
        if queue is not None:  # wake the thread waiting for an answer: there will be none
            queue.put((None, None))
        return OSError(problem)

    def recv(self, transport: Any, nr_bytes: int) -> bytearray:
        """Read ``nr_bytes`` (fewer at the end of the stream) as pynetdicom's own ``recv`` does, bounded.

        An OSError here is a closed connection to pynetdicom, which aborts the association.
        """
        if self.problem is not None:
            raise self._refuse(self.problem, self.setting)
        if nr_bytes > MAX_PDU_BYTES + 6:  # the length a PDU header declares, past what we announced
            raise self._refuse(f"a PDU of {nr_bytes} bytes, more than the {MAX_PDU_BYTES} it was allowed")
        raw: socket.socket = transport.socket
        before = raw.gettimeout()
        out = bytearray()
        try:
            while len(out) < nr_bytes:
                left = self._deadline - time.monotonic()
                if left <= 0:
                    raise self._refuse(f"no complete answer within {self.timeout_s:g} s", "timeout_s")
                raw.settimeout(left if before is None else min(before, left))
                try:
                    data = raw.recv(min(_READ_BYTES, nr_bytes - len(out)))
                except TimeoutError:
                    continue  # the loop's check says which timeout it was
                if not data:
                    break
                out += data
                self._received += len(data)
                if self._received > self.message_bytes:
                    size = f"{round(self.message_bytes / 2**20, 3):g} MiB"  # as the protocol gave it
                    raise self._refuse(f"a message larger than {size}", self._limit_setting)
        finally:
            try:
                raw.settimeout(before)
            except OSError:  # the socket is closed already
                pass
        return out


def install_guard(event: Any, message_bytes: int, timeout_s: float, setting: str) -> Guard:
    """Put a :class:`Guard` on the association of an ``EVT_CONN_OPEN`` event; the guard."""
    assoc = event.assoc
    guard = Guard(assoc, message_bytes, timeout_s, setting)
    transport = assoc.dul.socket
    transport.recv = lambda nr_bytes: guard.recv(transport, nr_bytes)
    _guards[assoc] = guard
    return guard


def guard_of(assoc: Any) -> Guard | None:
    """The guard of an association, if one was installed."""
    return _guards.get(assoc)


def refused_by_guard(assoc: Any, field: str) -> str | None:
    """What the guard of ``assoc`` refused, as the end of a message (``field``: e.g. ``data.source``)."""
    guard = guard_of(assoc)
    if guard is None or guard.problem is None:
        return None
    advice = f"or raise {field}.{guard.setting}" if guard.setting else "or ask its administrator"
    return f"sent {guard.problem}; the association was aborted. Check that the PACS is well, {advice}."


def guard_handlers(message_bytes: int, timeout_s: float, setting: str) -> list[tuple[Any, Any]]:
    """Event handlers (pynetdicom) that guard every association they are given to (see the module).

    ``setting``: the protocol setting that gives ``message_bytes`` (e.g. ``limits.answer_mib``).
    """
    from pynetdicom import evt

    def opened(event: Any) -> None:
        install_guard(event, message_bytes, timeout_s, setting)

    def sent(event: Any) -> None:
        guard = guard_of(event.assoc)
        if guard is not None:
            guard.progress()

    def received(event: Any) -> None:
        guard = guard_of(event.assoc)
        if guard is not None:
            guard.message_received()

    return [(evt.EVT_CONN_OPEN, opened), (evt.EVT_PDU_SENT, sent), (evt.EVT_DIMSE_RECV, received)]
