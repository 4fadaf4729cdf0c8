from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest

from sitecal._pseudonym import Pseudonymizer, load_or_create_key
from sitecal.errors import OutputError


def test_key_file_created_private_and_reused(tmp_path: Path) -> None:
    path = tmp_path / "k" / ".key"
    key = load_or_create_key(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert re.fullmatch(rb"[0-9a-f]{64}", key) and path.read_bytes() == key + b"\n"
    assert load_or_create_key(path) == key
    assert [p.name for p in path.parent.iterdir()] == [".key"]  # no temporary file left behind
    path.write_text("short")
    with pytest.raises(OutputError, match="not a pseudonymisation key created by sitecal"):
        load_or_create_key(path)


def test_pseudonyms_are_keyed_stable_and_typed() -> None:
    a, b = Pseudonymizer(b"a" * 32), Pseudonymizer(b"b" * 32)
    assert a("patient", "PAT001") == a("patient", "PAT001")
    assert a("patient", "PAT001") != b("patient", "PAT001")
    assert a("patient", "X") != a("study", "X")
    assert a("patient", "PAT001").startswith("P-") and len(a("patient", "PAT001")) == 18
    assert "a" * 32 not in repr(a)


def test_every_path_part_is_pseudonymised_and_folders_still_group() -> None:
    p = Pseudonymizer(b"k" * 32)
    written = p.path(Path("site-1/s000001/IM00001.dcm"))
    assert re.fullmatch(r"F-[0-9a-f]{16}/F-[0-9a-f]{16}/F-[0-9a-f]{16}\.dcm", written)
    # the same folder has the same pseudonym; a folder of the same name elsewhere another one
    assert p.path(Path("site-1/s000001/IM00002.dcm")).rsplit("/", 1)[0] == written.rsplit("/", 1)[0]
    assert p.path(Path("site-2/s000001/IM00001.dcm")).split("/")[1] != written.split("/")[1]
    assert p.path(Path("a/b.DCM")).endswith(".DCM") and p.path(Path("a/b.txt")).count(".") == 0
    assert p.path(Path(".")) == "."


def test_key_fingerprint_names_the_key_without_revealing_it() -> None:
    a, b = Pseudonymizer(b"a" * 32), Pseudonymizer(b"b" * 32)
    assert a.fingerprint == Pseudonymizer(b"a" * 32).fingerprint != b.fingerprint
    assert len(a.fingerprint) == 16 and "a" * 8 not in a.fingerprint
