"""DIMSE associations with a PACS (pynetdicom), and messages a PACS administrator can act on.

:func:`associate` opens an association as ``calling_ae`` to the configured peer with the presentation
contexts asked for, its timeouts, TLS and user identity, and turns every way it can fail into a
:class:`PacsError` that names it: rejected (with the result, the source and the reason code), aborted,
no answer, or an abstract syntax the PACS did not accept. :func:`status_problem` does the same for a
DIMSE status.
"""

from __future__ import annotations

import logging
import socket
import ssl
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sitecal.pacs._credentials import Credentials
from sitecal.pacs._guard import MAX_PDU_BYTES, guard_handlers, refused_by_guard
from sitecal.pacs._peer import PacsError
from sitecal.protocol import DimseService, TlsSettings

__all__ = [
    "STORAGE_SYNTAXES",
    "associate",
    "check_reachable",
    "no_delay",
    "status_problem",
    "tls_context",
]


# pynetdicom logs every association and message at INFO and its failures as errors; sitecal's own
# message names each failure it meets (in run.log and on the console), so its lines would only repeat them
logging.getLogger("pynetdicom").setLevel(logging.CRITICAL)

#: Transfer syntaxes proposed for instances received (uncompressed first, then the usual compressions).
STORAGE_SYNTAXES = (
    "1.2.840.10008.1.2.1",  # Explicit VR Little Endian
    "1.2.840.10008.1.2",  # Implicit VR Little Endian
    "1.2.840.10008.1.2.4.70",  # JPEG Lossless, SV1
    "1.2.840.10008.1.2.4.50",  # JPEG Baseline
    "1.2.840.10008.1.2.4.51",  # JPEG Extended
    "1.2.840.10008.1.2.4.57",  # JPEG Lossless
    "1.2.840.10008.1.2.4.80",  # JPEG-LS Lossless
    "1.2.840.10008.1.2.4.81",  # JPEG-LS Near-lossless
    "1.2.840.10008.1.2.4.90",  # JPEG 2000 Lossless
    "1.2.840.10008.1.2.4.91",  # JPEG 2000
    "1.2.840.10008.1.2.5",  # RLE Lossless
    "1.2.840.10008.1.2.1.99",  # Deflated Explicit VR Little Endian
)

#: A-ASSOCIATE-RJ (result source, reason) -> what it means (PS3.8 Table 9-21).
_REJECTED = {
    (1, 1): "no reason given",
    (1, 2): "application context name not supported",
    (1, 3): "calling AE title not recognised",
    (1, 7): "called AE title not recognised",
    (2, 1): "no reason given",
    (2, 2): "protocol version not supported",
    (3, 1): "temporary congestion",
    (3, 2): "local limit exceeded",
}
_SOURCE = {1: "the PACS (service user)", 2: "its ACSE provider", 3: "its presentation provider"}

#: DIMSE status -> what it means (PS3.4 C.4 and B.2, PS3.7 C).
_STATUS = {
    0x0110: "processing failure",
    0x0122: "SOP class not supported",
    0x0124: "not authorised",
    0x0211: "unrecognised operation",
    0xA700: "out of resources",
    0xA701: "out of resources: unable to calculate the number of matches",
    0xA702: "out of resources: unable to perform sub-operations",
    0xA801: "move destination unknown",
    0xA900: "identifier does not match SOP class",
    0xAA00: "none of the requested instances were found",
    0xB000: "sub-operations complete, one or more failures",
    0xFE00: "cancelled",
}


def status_problem(code: int) -> str:
    """``0xA702 (out of resources: unable to perform sub-operations)``: a status and its meaning."""
    meaning = _STATUS.get(code)
    if meaning is None and 0xC000 <= code <= 0xCFFF:
        meaning = "unable to process"
    return f"status 0x{code:04X}" + (f" ({meaning})" if meaning else "")


def _where(service: DimseService) -> str:
    peer = service.dimse
    return f"{peer.ae_title} at {peer.host}:{peer.port}"


def tls_context(tls: TlsSettings, resolve: Callable[[str], Path], *, server: bool = False) -> ssl.SSLContext:
    """An SSL context: the site authority to trust (or the system's), and our certificate if given."""
    purpose = ssl.Purpose.CLIENT_AUTH if server else ssl.Purpose.SERVER_AUTH
    cafile = None if tls.ca_file is None else str(resolve(tls.ca_file))
    context = ssl.create_default_context(purpose, cafile=cafile)
    if tls.cert_file is not None and tls.key_file is not None:
        context.load_cert_chain(str(resolve(tls.cert_file)), str(resolve(tls.key_file)))
    return context


def no_delay(event: Any) -> None:
    """Send each PDU at once (TCP_NODELAY) on a connection just opened (an EVT_CONN_OPEN handler).

    pynetdicom writes a message's command and dataset as separate segments; with Nagle's algorithm the
    second waits for the peer's delayed acknowledgement, about 40 ms a request.
    """
    sock = getattr(getattr(event.assoc.dul, "socket", None), "socket", None)
    if sock is not None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:  # not a TCP socket: nothing to tune
            pass


def _identity(credentials: Credentials | None) -> list[Any]:
    if credentials is None:
        return []
    from pynetdicom.pdu_primitives import UserIdentityNegotiation

    item = UserIdentityNegotiation()
    if credentials.token is not None:
        item.user_identity_type, item.primary_field = 5, credentials.token.encode()
    elif credentials.username is not None and credentials.password is not None:
        item.user_identity_type = 2
        item.primary_field = credentials.username.encode()
        item.secondary_field = credentials.password.encode()
    else:
        return []
    return [item]


def associate(
    service: DimseService,
    credentials: Credentials | None,
    resolve: Callable[[str], Path],
    *,
    what: str,
    contexts: Sequence[str] = (),
    send: Sequence[tuple[str, str]] = (),
    receive: Sequence[str] = (),
    on_store: Callable[[Any], int] | None = None,
    field: str = "data.source",
) -> Any:
    """An established association to ``service`` that accepted every abstract syntax asked for.

    ``contexts``: SOP classes we use as SCU (query, retrieve), in the default transfer syntaxes;
    ``send``: (SOP class, transfer syntax) of instances we send (C-STORE); ``receive``: storage SOP classes
    we accept instances of on this association (C-GET, SCP role), each handled by ``on_store``.
    Every message the peer sends on it is bounded (:mod:`sitecal.pacs._guard`): an instance received
    by ``service.limits.instance_mib``, any other answer by ``answer_mib``, each by ``timeout_s``.
    Raises :class:`PacsError` naming what failed and what to check.
    """
    from pynetdicom import build_role

    ae = _application_entity(service, what, contexts=contexts, send=send, receive=receive)
    ext_neg = [build_role(uid, scp_role=True) for uid in receive] + _identity(credentials)
    seen: dict[str, bool] = {}
    handlers = _handlers(service, seen, receive=receive, on_store=on_store)
    tls_args = _tls_args(service, resolve, what, field)
    peer = service.dimse
    started = time.monotonic()
    assoc = ae.associate(
        peer.host,
        peer.port,
        ae_title=peer.ae_title,
        ext_neg=ext_neg or None,
        evt_handlers=handlers,
        tls_args=tls_args,
    )
    if assoc.is_established:
        _check_accepted(assoc, service, what, [*contexts, *(u for u, _ in send)])
        return assoc
    _close(assoc)
    raise _failure(service, assoc, what, field, connected=seen.get("connected", False), started=started)


def _application_entity(
    service: DimseService,
    what: str,
    *,
    contexts: Sequence[str],
    send: Sequence[tuple[str, str]],
    receive: Sequence[str],
) -> Any:
    """Our AE, with the service's timeouts and the presentation contexts asked for (at most 128)."""
    from pynetdicom import AE
    from pynetdicom.presentation import build_context

    ae = AE(ae_title=service.calling_ae)
    for name in ("acse_timeout", "dimse_timeout", "network_timeout", "connection_timeout"):
        setattr(ae, name, service.timeout_s)
    ae.maximum_pdu_size = MAX_PDU_BYTES  # announced: the guard refuses a longer PDU
    requested = [build_context(uid) for uid in contexts]
    requested += [build_context(uid, [syntax]) for uid, syntax in send]
    requested += [build_context(uid, list(STORAGE_SYNTAXES)) for uid in receive]
    if len(requested) > 128:
        raise PacsError(f"{what}: more than 128 SOP classes in one association.")
    ae.requested_contexts = requested
    return ae


def _handlers(
    service: DimseService,
    seen: dict[str, bool],
    *,
    receive: Sequence[str],
    on_store: Callable[[Any], int] | None,
) -> list[Any]:
    """The association's event handlers: the guard's bounds, ``on_store``, and one noting the connection.

    The connection handler sets ``seen["connected"]``, so that a failure tells no connection from no
    answer.
    """
    from pynetdicom import evt

    def opened(event: Any) -> None:
        seen["connected"] = True
        no_delay(event)

    limits = service.limits
    if receive:
        guarded = guard_handlers(limits.instance_bytes, service.timeout_s, "limits.instance_mib")
    else:
        guarded = guard_handlers(limits.answer_bytes, service.timeout_s, "limits.answer_mib")
    handlers: list[Any] = [(evt.EVT_CONN_OPEN, opened), *guarded]
    if on_store is not None:
        handlers.append((evt.EVT_C_STORE, on_store))
    return handlers


def _tls_args(
    service: DimseService, resolve: Callable[[str], Path], what: str, field: str
) -> tuple[ssl.SSLContext, str] | None:
    """The ``tls_args`` pynetdicom takes for the service's TLS settings (``None`` without TLS)."""
    if service.tls is None:
        return None
    try:
        return tls_context(service.tls, resolve), service.dimse.host
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise PacsError(
            f"{what}: the TLS files of {field}.tls cannot be used ({type(exc).__name__}: "
            f"{getattr(exc, 'strerror', None) or exc}). Check ca_file, cert_file and key_file."
        ) from None


def _check_accepted(assoc: Any, service: DimseService, what: str, asked: Sequence[str]) -> None:
    """Release the association and raise when the PACS did not accept every abstract syntax asked for."""
    accepted = {c.abstract_syntax for c in assoc.accepted_contexts}
    refused = [uid for uid in asked if uid not in accepted]
    if refused:
        assoc.release()
        names = ", ".join(_sop_name(uid) for uid in refused)
        raise PacsError(
            f"{what}: {_where(service)} accepted the association but not {names}. Ask the PACS "
            f"administrator to allow it for {service.calling_ae}"
            + (", or use retrieve: move" if "Get" in names else "")
            + "."
        )


def _failure(
    service: DimseService, assoc: Any, what: str, field: str, *, connected: bool, started: float
) -> PacsError:
    """Why an association attempt begun at ``started`` (``time.monotonic``) was not established.

    Refused by the guard, rejected, no connection, no answer within the timeout, or aborted.
    """
    if said := refused_by_guard(assoc, field):
        return PacsError(f"{what}: {_where(service)} {said}")
    if assoc.is_rejected:
        return PacsError(_rejection(service, assoc, what, field))
    secured = "; or the TLS handshake failed (check tls and that the port speaks TLS)" if service.tls else ""
    if not connected:
        return PacsError(
            f"{what}: cannot connect to {_where(service)} (connection refused, host unreachable, or no "
            f"answer within {field}.timeout_s, {service.timeout_s:g} s){secured}. Check that the PACS is "
            f"running and that {field}.dimse names its host and DICOM port."
        )
    if time.monotonic() - started >= 0.95 * service.timeout_s:  # our own ACSE timeout ended it
        return PacsError(
            f"{what}: {_where(service)} accepted the connection but did not answer the association "
            f"request within {field}.timeout_s ({service.timeout_s:g} s){secured}. Check that "
            f"{field}.dimse.port is the PACS's DICOM port."
        )
    plain = f" (a port that expects TLS needs {field}.tls)" if service.tls is None else ""
    return PacsError(
        f"{what}: {_where(service)} closed the connection without accepting the association "
        f"(A-ABORT or a dropped connection){secured}. Check that the PACS knows {service.calling_ae} "
        f"({field}.calling_ae) and accepts associations from this host, and that the port is its DICOM "
        f"port{plain}."
    )


def _close(assoc: Any) -> None:
    """Close the socket of an association that failed (pynetdicom can leave it open)."""
    transport = getattr(assoc.dul, "socket", None)
    sock = getattr(transport, "socket", None)
    if sock is not None:
        sock.close()


def check_reachable(
    service: DimseService,
    what: str,
    field: str = "data.source",
    resolve: Callable[[str], Path] = Path,
) -> None:
    """Open and close one TCP connection (and TLS handshake) to the peer; raises PacsError saying why not.

    (``sitecal check`` asks this before associating: it tells a refused port from a wrong host name, a
    filtered network or an untrusted certificate, which an association attempt reports alike.)
    """
    peer = service.dimse
    try:
        with socket.create_connection((peer.host, peer.port), timeout=service.timeout_s) as sock:
            if service.tls is None:
                return
            context = tls_context(service.tls, resolve)
            with context.wrap_socket(sock, server_hostname=peer.host):
                return
    except ssl.SSLError as exc:
        raise PacsError(
            f"{what}: TLS handshake with {_where(service)} failed ({exc.reason or type(exc).__name__}): "
            f"the PACS's certificate is not trusted, does not name {peer.host}, or the port does not speak "
            f"TLS. Give the site authority as {field}.tls.ca_file, or check the port."
        ) from None
    except socket.gaierror:
        why = f"host name {peer.host!r} not found"
    except TimeoutError:
        why = f"no answer within {field}.timeout_s ({service.timeout_s:g} s): a firewall may drop it"
    except ConnectionRefusedError:
        why = f"connection refused: nothing listens on port {peer.port}"
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
    raise PacsError(
        f"{what}: cannot connect to {_where(service)} ({why}). Check that the PACS is running and that "
        f"{field}.dimse names its host and DICOM port."
    )


def _rejection(service: DimseService, assoc: Any, what: str, field: str) -> str:
    primitive = assoc.acceptor.primitive
    result, source, reason = (
        int(getattr(primitive, name, 0) or 0) for name in ("result", "result_source", "diagnostic")
    )
    meaning = _REJECTED.get((source, reason), "reason not defined by the standard")
    kind = {1: "permanently", 2: "for now (transient)"}.get(result, "")
    head = (
        f"{what}: {_where(service)} rejected the association {kind}: {meaning} (reason {reason}, from "
        f"{_SOURCE.get(source, f'source {source}')})"
    )
    hint = {
        (1, 7): f"Check {field}.dimse.ae_title: it must be the PACS's own AE title.",
        (1, 3): (
            f"Ask the PACS administrator to register {service.calling_ae} ({field}.calling_ae) for this "
            "host, or set calling_ae to the title the PACS knows."
        ),
        (3, 1): "The PACS is busy: try again later, or lower data.source.max_connections.",
        (3, 2): "The PACS allows fewer associations at once: lower data.source.max_connections.",
    }.get((source, reason), "Ask the PACS administrator what its log says about this association.")
    return f"{head}. {hint}"


def _sop_name(uid: str) -> str:
    from pydicom.uid import UID

    name = UID(uid).name
    return name if name != uid else f"SOP class {uid}"
