"""Protocol schema of a PACS data source: ``data.source`` (DICOMweb or DIMSE) and the query it runs.

A source names its peer and what to ask for; it never holds a secret. Credentials come from the
environment (``SITECAL_PACS_USERNAME`` / ``SITECAL_PACS_PASSWORD``, or ``SITECAL_PACS_TOKEN``) or from a
file the source names (``credentials_file``), outside the protocol and never copied into any output.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from sitecal.protocol._base import _Strict

__all__ = [
    "DicomwebDestination",
    "DicomwebService",
    "DicomwebSource",
    "DimseDestination",
    "DimseService",
    "DimseSource",
    "PacsLimits",
    "PacsQuery",
    "PeerSettings",
    "TlsSettings",
    "one_peer_kind",
    "source_id",
]

#: An AE title: 1 to 16 characters of the DICOM default repertoire, no backslash, not only spaces.
_AE_TITLE = re.compile(r"^(?! *$)[\x20-\x5b\x5d-\x7e]{1,16}$")
#: Host names taken as this machine (plain http and an unencrypted move port are accepted only there).
LOOPBACK = ("localhost", "127.0.0.1", "::1", "[::1]")
#: Most concurrent associations or HTTP connections a retrieval may open.
MAX_CONNECTIONS = 16


def _ae_title(value: str) -> str:
    if not _AE_TITLE.match(value):
        raise ValueError(
            f"{value!r} is not an AE title: 1 to 16 printable ASCII characters, no backslash, not all spaces"
        )
    return value


class TlsSettings(_Strict):
    """TLS for a DICOMweb URL or a DIMSE association: which authority to trust, and our own certificate.

    Attributes
    ----------
    ca_file : str, optional
        PEM bundle of the authorities to trust (default: the system's).
    cert_file, key_file : str, optional
        Client certificate and its private key, for a peer that asks for one (given together).
    """

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None

    @model_validator(mode="after")
    def _pair(self) -> TlsSettings:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("give cert_file and key_file together (a client certificate and its key)")
        return self


class PacsQuery(_Strict):
    """Which studies to ask the PACS for (every given field narrows the query).

    Attributes
    ----------
    study_dates : [first, last], optional
        Study dates, inclusive (``YYYY-MM-DD``).
    modalities : list of str, optional
        ModalitiesInStudy, e.g. ``[CR, DX]``.
    station_names, institutions : list of str, optional
        StationName / InstitutionName values; a study matches any of them.
    accession_numbers : str, optional
        A CSV file (relative to the protocol) with a column ``AccessionNumber``: the worklist.
    max_studies : int
        Refuse a query that matches more studies (a query too wide by mistake), default 100000.
    """

    study_dates: tuple[dt.date, dt.date] | None = None
    modalities: list[str] | None = Field(default=None, min_length=1)
    station_names: list[str] | None = Field(default=None, min_length=1)
    institutions: list[str] | None = Field(default=None, min_length=1)
    accession_numbers: str | None = Field(
        default=None, description="worklist CSV with a column AccessionNumber"
    )
    max_studies: int = Field(default=100_000, ge=1, le=10_000_000)

    @field_validator("study_dates")
    @classmethod
    def _ordered(cls, value: tuple[dt.date, dt.date] | None) -> tuple[dt.date, dt.date] | None:
        if value is not None and value[0] > value[1]:
            raise ValueError(f"give [first, last] with first <= last; got {value[0]} after {value[1]}")
        return value

    @field_validator("modalities")
    @classmethod
    def _modality_codes(cls, value: list[str] | None) -> list[str] | None:
        for code in value or []:
            if not re.fullmatch(r"[A-Z0-9_]{1,16}", code):
                raise ValueError(f"{code!r} is not a modality code (e.g. CR, DX, CT)")
        return value


class PeerSettings(_Strict):
    """A DIMSE peer: where it listens and its AE title."""

    host: str = Field(min_length=1, max_length=253)
    port: int = Field(ge=1, le=65535)
    ae_title: str

    _title = field_validator("ae_title")(_ae_title)


class PacsLimits(_Strict):
    """How much one answer of the peer may hold: a peer is not trusted to end what it sends.

    The defaults are far above what a real PACS sends and far below what would exhaust a workstation;
    an answer past a limit ends the request with an error naming the limit (exit 2 during the study
    search and in ``sitecal check``; an exclusion of that study during its retrieval).

    Attributes
    ----------
    answer_mib : float
        Largest answer other than an instance, in MiB (default 64): a QIDO-RS page (JSON), a STOW-RS
        reply, a DIMSE message that is not a C-STORE. sitecal asks QIDO-RS for pages of
        1,000 matches, about 1.5 MiB for a study search; a server that ignores the page size and sends
        100,000 studies at once sends about 150 MiB (raise the limit for it).
    instance_mib : float
        Largest instance received, in MiB (default 1024): WADO-RS's answer, written to disk as it
        arrives, or a C-STORE message of C-GET or C-MOVE. The scan refuses an image of more than 2**28
        values (1 GiB as float32, ``inputs.max_pixels_per_image``): its pixel data, stored at up to 32
        bits a value, needs 1 GiB at most.
    pages : int
        Most QIDO-RS pages one search may take (default 10,000: 10 million matches at 1,000 a page, or
        a million at a server's own 100).
    matches : int
        Most answers one search may return (default 1,000,000): QIDO-RS matches over all its pages, or
        C-FIND responses. A study search also stops at ``query.max_studies`` studies.
    instances_per_study : int
        Most instances one study may list (default 100,000; the largest studies, a CT perfusion or a
        cardiac 4-D CT, hold tens of thousands).
    """

    answer_mib: float = Field(default=64.0, gt=0, le=4096)
    instance_mib: float = Field(default=1024.0, gt=0, le=65536)
    pages: int = Field(default=10_000, ge=1, le=10_000_000)
    matches: int = Field(default=1_000_000, ge=1, le=100_000_000)
    instances_per_study: int = Field(default=100_000, ge=1, le=10_000_000)

    @property
    def answer_bytes(self) -> int:
        """``answer_mib`` in bytes."""
        return int(self.answer_mib * 2**20)

    @property
    def instance_bytes(self) -> int:
        """``instance_mib`` in bytes."""
        return int(self.instance_mib * 2**20)


class _Connection(_Strict):
    credentials_file: str | None = Field(
        default=None,
        description="a file holding username and password (or token), readable by its owner only",
    )
    tls: TlsSettings | None = None
    timeout_s: float = Field(
        default=60.0,
        gt=0,
        le=3600,
        description="the longest one request may take in all, its whole answer included (a wall-clock "
        "deadline, not only a socket timeout)",
    )
    limits: PacsLimits = Field(default_factory=PacsLimits)


class _Retrieval(_Strict):
    query: PacsQuery = Field(default_factory=PacsQuery)
    max_connections: int = Field(default=4, ge=1, le=MAX_CONNECTIONS)


class DicomwebService(_Connection):
    """A DICOMweb service and how to reach it.

    Attributes
    ----------
    dicomweb : str
        The service's base URL, e.g. ``https://pacs.example.org/dicom-web`` (http only on loopback).
    """

    dicomweb: str

    @field_validator("dicomweb")
    @classmethod
    def _url(cls, value: str) -> str:
        match = re.fullmatch(r"(https?)://([^/:?#@]+)(:\d{1,5})?(/[^?#]*)?", value)
        if match is None:
            raise ValueError(
                f"{value!r} is not an http(s) URL of a DICOMweb service (no user, query or fragment)"
            )
        scheme, host = match.group(1), match.group(2)
        if scheme == "http" and host not in LOOPBACK:
            raise ValueError(
                "plain http sends studies and credentials in clear: use https (with tls.ca_file for a "
                "site authority); http is accepted on loopback only"
            )
        return value.rstrip("/")


class DimseService(_Connection):
    """A DIMSE peer and how to reach it.

    Attributes
    ----------
    dimse : PeerSettings
        The PACS: host, port and AE title.
    calling_ae : str
        Our AE title, as the PACS knows it.

    Credentials, when given, go in the association request as a user identity (username and password,
    or a token as a JWT); a PACS that does not ask for one ignores it.
    """

    dimse: PeerSettings
    calling_ae: str = "SITECAL"

    _title = field_validator("calling_ae")(_ae_title)


class DicomwebSource(DicomwebService, _Retrieval):
    """A DICOMweb server to retrieve from: QIDO-RS finds the studies, WADO-RS fetches each instance."""


class DimseSource(DimseService, _Retrieval):
    """A DIMSE peer to retrieve from: C-FIND finds the studies, C-GET (default) or C-MOVE fetches them.

    Attributes
    ----------
    retrieve : {"get", "move"}
        C-GET on the same association, or C-MOVE to ``move_port`` where sitecal listens as ``calling_ae``.
    move_port : int, optional
        The port of our storage SCP for C-MOVE (the PACS must know ``calling_ae`` at this host and port).
    """

    retrieve: Literal["get", "move"] = "get"
    move_port: int | None = Field(default=None, ge=1, le=65535)

    @model_validator(mode="after")
    def _move_needs_port(self) -> DimseSource:
        if self.retrieve == "move" and self.move_port is None:
            raise ValueError("retrieve: move needs move_port (where sitecal's storage SCP listens)")
        if self.retrieve == "get" and self.move_port is not None:
            raise ValueError(
                "move_port is for retrieve: move; C-GET returns the studies on its own association"
            )
        if self.retrieve == "move" and self.tls is not None and self.tls.cert_file is None:
            raise ValueError(
                "retrieve: move over TLS needs tls.cert_file and tls.key_file: the certificate sitecal's "
                "storage SCP presents to the PACS"
            )
        return self


class DicomwebDestination(DicomwebService):
    """Where ``report.dcm`` is sent by STOW-RS (``sitecal send``, or after the run with ``after_run``)."""

    after_run: bool = False


class DimseDestination(DimseService):
    """Where ``report.dcm`` is sent by C-STORE (``sitecal send``, or after the run with ``after_run``)."""

    after_run: bool = False


def one_peer_kind(value: Any, kinds: tuple[type[BaseModel], type[BaseModel]]) -> Any:
    """Validate a mapping as the DICOMweb or the DIMSE model of ``kinds``, by its one key naming a peer."""
    if not isinstance(value, Mapping):
        return value
    given = [k for k in ("dicomweb", "dimse") if k in value]
    if len(given) != 1:
        raise ValueError(
            "give exactly one of 'dicomweb: URL' or 'dimse: {host, port, ae_title}'"
            + (f"; got {' and '.join(given)}" if given else "")
        )
    return (kinds[0] if given == ["dicomweb"] else kinds[1]).model_validate(dict(value))


def source_id(source: DicomwebSource | DimseSource) -> str:
    """A short name of the source and its query (not its credentials, connections, timeout or limits)."""
    settings = source.model_dump(
        mode="json", exclude={"credentials_file", "max_connections", "timeout_s", "limits"}
    )
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
