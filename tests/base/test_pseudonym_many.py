"""Pseudonymizer.many: the same pseudonyms as one call per value, for any key length (RFC 2104 pads)."""

from __future__ import annotations

import hashlib
import hmac
import pickle

import pytest

from sitecal._pseudonym import Pseudonymizer

VALUES = ["1.2.840.10008.1", "", "DOE^JANE", "é\u2028ß", "\udcff\udcfe", "x" * 1000]


@pytest.mark.parametrize("key", [b"", b"k", b"0123456789abcdef" * 4, b"z" * 64, b"y" * 65, b"w" * 300])
@pytest.mark.parametrize("kind", ["study", "patient", "path"])
def test_many_equals_one_at_a_time_and_hmac(key: bytes, kind: str) -> None:
    p = Pseudonymizer(key)
    # the definition, from the standard library's HMAC
    expected = [
        {"study": "S", "patient": "P", "path": "F"}[kind]
        + "-"
        + hmac.new(key, f"{kind}\0{v}".encode("utf-8", "surrogateescape"), hashlib.sha256).hexdigest()[:16]
        for v in VALUES
    ]
    assert p.many(kind, VALUES) == [p(kind, v) for v in VALUES] == expected
    assert [p.digest(kind, v)[:16] for v in VALUES] == [e[2:] for e in expected]


def test_a_pseudonymizer_still_pickles_and_compares() -> None:
    p = Pseudonymizer(b"0123456789abcdef" * 4)
    p.many("study", ["a"])
    assert pickle.loads(pickle.dumps(p)) == p
    assert "0123" not in repr(p)
