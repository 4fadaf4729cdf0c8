"""The pieces that keep a PACS's answers bounded, one at a time: the protocol's limits, the WADO-RS part
reader, what of a server's error is shown, where a redirect points, and a C-GET that sends too much.

(A whole hostile server against `sitecal check` and `sitecal run` is in tests/security/test_hostile_pacs.py.)
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from pydantic import ValidationError

from sitecal.pacs import retrieve_studies
from sitecal.pacs._credentials import Credentials
from sitecal.pacs._http import _target, redact, server_message
from sitecal.pacs._multipart import FirstPart
from sitecal.protocol._pacs import DicomwebSource, DimseSource, PacsLimits, source_id

CREDENTIALS = Credentials("test", username="reader", password="s3cret-Pass")


# -- the protocol's limits --------------------------------------------------------------------------
def test_the_limits_have_their_defaults_and_bounds() -> None:
    limits = PacsLimits()
    assert (limits.answer_bytes, limits.instance_bytes) == (64 << 20, 1 << 30)
    assert (limits.pages, limits.matches, limits.instances_per_study) == (10_000, 1_000_000, 100_000)
    with pytest.raises(ValidationError, match="greater than 0"):
        PacsLimits(answer_mib=0)
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        DicomwebSource.model_validate({"dicomweb": "https://p.example/dw", "limits": {"bytes": 1}})


def test_limits_and_timeout_do_not_rename_the_store() -> None:
    plain = DicomwebSource.model_validate({"dicomweb": "https://p.example/dw"})
    bounded = DicomwebSource.model_validate(
        {"dicomweb": "https://p.example/dw", "timeout_s": 5, "limits": {"answer_mib": 1}}
    )
    assert source_id(plain) == source_id(bounded)  # a store filled under other limits is resumed


# -- the WADO-RS part reader ------------------------------------------------------------------------
BODY = b"--xyz\r\nContent-Type: application/dicom\r\n\r\nDICOM-BYTES\r\n--xy\r\nMORE\r\n--xyz--\r\n"


@pytest.mark.parametrize("chunk", [1, 3, 7, len(BODY)])
def test_the_first_part_is_found_whatever_the_chunks(chunk: int) -> None:
    got = bytearray()
    part = FirstPart('multipart/related; type="application/dicom"; boundary="xyz"', got.extend)
    ended = False
    for i in range(0, len(BODY), chunk):
        ended = part.feed(BODY[i : i + chunk])
        if ended:
            break
    assert ended
    part.finish()
    assert bytes(got) == b"DICOM-BYTES\r\n--xy\r\nMORE"  # a near-boundary inside the content is content


def test_a_bare_instance_is_taken_whole_and_a_broken_part_is_refused() -> None:
    got = bytearray()
    bare = FirstPart("application/dicom", got.extend)
    bare.feed(b"abc")
    bare.feed(b"def")
    bare.finish()
    assert bytes(got) == b"abcdef"
    unclosed = FirstPart("multipart/related; boundary=xyz", lambda _: None)
    unclosed.feed(b"--xyz\r\n\r\npartial")
    with pytest.raises(ValueError, match="ended inside the instance"):
        unclosed.finish()
    with pytest.raises(ValueError, match="unexpected media type 'text/html'"):
        FirstPart("text/html; charset=utf-8", lambda _: None)
    endless_headers = FirstPart("multipart/related; boundary=xyz", lambda _: None)
    with pytest.raises(ValueError, match="headers do not end"):
        for _ in range(100):
            endless_headers.feed(b"X-Header: " + b"x" * 1000 + b"\r\n")


# -- what of a server's error is shown --------------------------------------------------------------
def _response(body: bytes) -> requests.Response:
    response = requests.Response()
    response.status_code = 401
    response._content = body
    return response


def test_an_error_answer_is_shown_without_credentials_controls_or_identifiers() -> None:
    basic = base64.b64encode(b"reader:s3cret-Pass").decode()
    body = (
        f"\x1b[2J\x07denied for reader: Basic {basic} | {basic.rstrip('=')} | s3cret-Pass | s3cret%2DPass; "
        "study 1.2.840.113619.2.55.3 " + "x" * 400 + "\nsecond line"
    ).encode()
    said = server_message(_response(body), CREDENTIALS)
    assert "s3cret" not in said and basic.rstrip("=") not in said and "reader" not in said
    assert "\x1b" not in said and "\x07" not in said and "1.2.840" not in said and "second" not in said
    assert said.startswith(
        ': "[2J denied for <hidden>: Basic <hidden> | <hidden> | <hidden> | <hidden>; study <uid> xxx'
    )
    assert len(said) <= 200 + 4 and said.endswith('..."')


def test_an_authorization_header_or_a_token_echoed_is_hidden_whoever_it_belongs_to() -> None:
    text = 'Authorization: Bearer eyJhbGciOi.eyJzdWIi.c2lnbmF0dXJl\n{"authorization": "Basic Zm9vOmJhcg=="}'
    assert redact(text, None) == 'Authorization: <hidden>\n{"authorization": "<hidden>"}'
    assert redact("Basic authentication required; bearer abcd1234efgh", None) == (
        "Basic authentication required; bearer <hidden>"
    )


@pytest.mark.parametrize(
    ("location", "words"),
    [
        ("https://other.example/dicom-web", "another host (other.example)"),
        ("http://pacs.example/dicom-web", "plain http"),
        ("/login?next=/dicom-web", "another URL on the same server"),
        ("https://evil.example%0d%0aX:1/", "another host"),
        (None, "nowhere (no Location header)"),
    ],
)
def test_a_redirect_is_named_by_where_it_points_never_its_path(location: str | None, words: str) -> None:
    assert _target("https://pacs.example/dicom-web/studies", location) == words


# -- DIMSE: a C-GET that sends what was not asked, or more than the limit ---------------------------
STUDY = "1.2.826.0.1.3680043.10.7"


def _instance(sop: str, pixels: int) -> Any:
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.uid import ExplicitVRLittleEndian, SecondaryCaptureImageStorage

    ds = Dataset()
    ds.SOPClassUID, ds.SOPInstanceUID = SecondaryCaptureImageStorage, sop
    ds.StudyInstanceUID, ds.SeriesInstanceUID = STUDY, STUDY + ".1"
    ds.Rows, ds.Columns, ds.BitsAllocated, ds.BitsStored, ds.HighBit = pixels // 256, 256, 8, 8, 7
    ds.SamplesPerPixel, ds.PixelRepresentation, ds.PhotometricInterpretation = 1, 0, "MONOCHROME2"
    ds.PixelData = b"\0" * pixels
    ds.file_meta = FileMetaDataset()
    ds.file_meta.TransferSyntaxUID = ExplicitVRLittleEndian
    return ds


@contextlib.contextmanager
def get_scp(sends: list[Any]) -> Iterator[int]:
    """A C-FIND / C-GET SCP: one study, one instance listed; a C-GET sends ``sends`` instead."""
    from pydicom.dataset import Dataset
    from pynetdicom import AE, StoragePresentationContexts, evt
    from pynetdicom.sop_class import (
        StudyRootQueryRetrieveInformationModelFind,
        StudyRootQueryRetrieveInformationModelGet,
    )

    def find(event: Any) -> Iterator[tuple[int, Any]]:
        answer = Dataset()
        answer.QueryRetrieveLevel = event.identifier.QueryRetrieveLevel
        answer.StudyInstanceUID = STUDY
        if answer.QueryRetrieveLevel == "IMAGE":
            answer.SeriesInstanceUID, answer.SOPInstanceUID = STUDY + ".1", STUDY + ".1.1"
            answer.SOPClassUID = "1.2.840.10008.5.1.4.1.1.7"
        yield 0xFF00, answer

    def get(event: Any) -> Iterator[Any]:
        yield len(sends)
        for ds in sends:
            yield 0xFF00, ds

    ae = AE(ae_title="HOSTILE")
    ae.add_supported_context(StudyRootQueryRetrieveInformationModelFind)
    ae.add_supported_context(StudyRootQueryRetrieveInformationModelGet)
    for context in StoragePresentationContexts:
        ae.add_supported_context(context.abstract_syntax, scu_role=False, scp_role=True)
    server = ae.start_server(
        ("127.0.0.1", 0), block=False, evt_handlers=[(evt.EVT_C_FIND, find), (evt.EVT_C_GET, get)]
    )
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()


def _retrieve(port: int, tmp_path: Path, **limits: Any) -> Any:
    source = DimseSource.model_validate(
        {
            "dimse": {"host": "127.0.0.1", "port": port, "ae_title": "HOSTILE"},
            "timeout_s": 5,
            "limits": limits,
        }
    )
    return retrieve_studies(source, store=tmp_path / "store", resolve=Path, progress=False)


@pytest.mark.timeout(60)
def test_an_instance_past_the_limit_aborts_its_c_get_and_excludes_the_study(tmp_path: Path) -> None:
    with get_scp([_instance(STUDY + ".1.1", 256 * 256)]) as port:
        result = _retrieve(port, tmp_path, instance_mib=0.01)
    ((uid, reason),) = result.failed
    assert uid == STUDY
    assert reason.startswith("not retrieved from the PACS: C-GET: HOSTILE at 127.0.0.1:") and reason.endswith(
        "sent a message larger than 0.01 MiB; the association was aborted. Check that the PACS is well, or "
        "raise data.source.limits.instance_mib."
    )
    assert not list((tmp_path / "store" / "files").rglob("*.dcm"))


@pytest.mark.timeout(60)
def test_instances_no_request_asked_for_are_refused_then_the_association_ended(tmp_path: Path) -> None:
    flood = [_instance(f"{STUDY}.9.{i}", 256) for i in range(40)]
    with get_scp(flood) as port:
        result = _retrieve(port, tmp_path)
    ((_, reason),) = result.failed
    assert "sent more than 16 instances that no request asked for; the association was aborted" in reason
    assert not list((tmp_path / "store" / "files").rglob("*.dcm"))  # none of them was kept
