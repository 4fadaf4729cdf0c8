"""TLS to a real Orthanc (DICOM TLS, and HTTPS through a TLS front) under a test authority: an untrusted
certificate is named with what to give, and with the authority both routes retrieve."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.pacs.conftest import CALLING_AE
from tests.pacs.orthanc import AE_TITLE, PASSWORD, USER, make_tls_files, running_orthanc, tls_proxy

from sitecal.pacs import retrieve_studies, source_problems
from sitecal.protocol._pacs import DicomwebSource, DimseSource

pytestmark = pytest.mark.slow


def test_an_untrusted_certificate_is_named_and_the_site_authority_makes_both_routes_work(
    pacs: Any, tmp_path: Path
) -> None:
    files = make_tls_files(tmp_path / "tls")
    credentials = tmp_path / "credentials.yaml"
    credentials.write_text(yaml.safe_dump({"username": USER, "password": PASSWORD}))
    credentials.chmod(0o600)
    some = sorted(pacs.accepted.rglob("*.dcm"))[:5]
    # Orthanc lets CALLING_AE query and retrieve over DICOM TLS
    known = {CALLING_AE: {"AET": CALLING_AE, "Host": "127.0.0.1", "Port": 1, "UseDicomTls": True}}
    with (
        running_orthanc(tmp_path / "orthanc", tls=files, modalities=known) as server,
        tls_proxy(server.http_port, files) as https,
    ):
        assert [server.upload(p) for p in some] == ["Success"] * 5
        web = {"dicomweb": f"https://127.0.0.1:{https}/dicom-web", "credentials_file": str(credentials)}
        peer = {"host": "127.0.0.1", "port": server.dicom_port, "ae_title": AE_TITLE}
        # without the site authority: named, with what to give
        (problem,) = source_problems(DicomwebSource.model_validate(web), Path)
        assert problem.startswith("data.source: QIDO-RS study search: TLS failure talking to 127.0.0.1:")
        assert "Give the site authority as data.source.tls.ca_file" in problem
        (problem,) = source_problems(DimseSource.model_validate({"dimse": peer, "tls": {}}), Path)
        assert problem.startswith(
            f"data.source: association: TLS handshake with {AE_TITLE} at 127.0.0.1:{server.dicom_port} "
            "failed (CERTIFICATE_VERIFY_FAILED)"
        )
        assert "Give the site authority as data.source.tls.ca_file" in problem
        # plain DIMSE to the TLS port: the PACS drops the connection
        (problem,) = source_problems(DimseSource.model_validate({"dimse": peer, "timeout_s": 5}), Path)
        assert problem.startswith(
            f"data.source: association: {AE_TITLE} at 127.0.0.1:{server.dicom_port} closed the connection "
            "without accepting the association"
        )
        assert problem.endswith("(a port that expects TLS needs data.source.tls).")
        # with it: both routes retrieve the five studies (the environment's REQUESTS_CA_BUNDLE, if any,
        # does not replace the site authority)
        trusted = {"ca_file": str(files.ca)}
        for source in (
            DicomwebSource.model_validate({**web, "tls": trusted}),
            DimseSource.model_validate({"dimse": peer, "tls": trusted}),
        ):
            assert source_problems(source, Path) == []
            result = retrieve_studies(
                source, store=tmp_path / type(source).__name__, resolve=Path, progress=False
            )
            assert (result.summary["studies_retrieved_now"], len(result.files), result.failed) == (5, 5, ())
