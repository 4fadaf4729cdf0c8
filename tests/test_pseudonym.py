from __future__ import annotations

import stat
from pathlib import Path

import pytest

from sitecal._pseudonym import Pseudonymizer, load_or_create_key
from sitecal.errors import OutputError


def test_key_file_created_private_and_reused(tmp_path: Path) -> None:
    path = tmp_path / "k" / ".key"
    key = load_or_create_key(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_or_create_key(path) == key
    path.write_text("short")
    with pytest.raises(OutputError, match="shorter than 32 characters"):
        load_or_create_key(path)


def test_pseudonyms_are_keyed_stable_and_typed() -> None:
    a, b = Pseudonymizer(b"a" * 32), Pseudonymizer(b"b" * 32)
    assert a("patient", "PAT001") == a("patient", "PAT001")
    assert a("patient", "PAT001") != b("patient", "PAT001")
    assert a("patient", "X") != a("study", "X")
    assert a("patient", "PAT001").startswith("P-") and len(a("patient", "PAT001")) == 18
    assert "a" * 32 not in repr(a)


def test_paths_lose_uids_and_identifiers() -> None:
    p = Pseudonymizer(b"k" * 32)
    assert p.path(Path("site-1/s000001/IM00001.dcm")) == "site-1/s000001/IM00001.dcm"
    masked = p.path(Path("PAT0042_scans/1.2.840.113619.2.55.3.1/1.2.840.99.1.2.dcm"), ["PAT0042"])
    assert "PAT0042" not in masked and "1.2.840" not in masked
    assert masked.endswith(".dcm") and masked.count("/") == 2


def test_key_fingerprint_names_the_key_without_revealing_it() -> None:
    a, b = Pseudonymizer(b"a" * 32), Pseudonymizer(b"b" * 32)
    assert a.fingerprint == Pseudonymizer(b"a" * 32).fingerprint != b.fingerprint
    assert len(a.fingerprint) == 16 and "a" * 8 not in a.fingerprint
