"""provenance.json: transitive dependency versions, the dataset manifest hash, file hashes, document ID."""

from __future__ import annotations

import hashlib
import json
import re
from importlib.metadata import PackageNotFoundError
from pathlib import Path
from typing import Any

import pytest

from sitecal import provenance
from sitecal.provenance import (
    dataset_manifest_sha256,
    dependency_versions,
    document_id,
    file_sha256,
    provenance_document,
)


def test_file_sha256_streams_in_chunks(tmp_path: Path) -> None:
    path = tmp_path / "big.bin"
    data = bytes(range(256)) * 9000  # 2.3 MB: more than two 1 MiB chunks
    path.write_bytes(data)
    assert file_sha256(path) == hashlib.sha256(data).hexdigest()
    assert file_sha256(tmp_path / "big.bin") == file_sha256(str(path))


def test_dataset_manifest_hash_recomputed_by_hand(tmp_path: Path) -> None:
    (tmp_path / "a.dcm").write_bytes(b"first file")
    (tmp_path / "b.dcm").write_bytes(b"second file")
    (tmp_path / "c.dcm").write_bytes(b"third file")
    pairs = [
        ("1.2.826.0.1.3680043.2.1125.10", tmp_path / "b.dcm"),
        ("1.2.826.0.1.3680043.2.1125.9", tmp_path / "a.dcm"),
        ("1.2.826.0.1.3680043.2.1125.1\x00", tmp_path / "c.dcm"),  # NUL padding of an odd-length UID
    ]
    # by hand, as the module docstring tells an auditor: "<uid> <sha256 of the file>\n", sorted bytewise
    # ("...1" < "...10" < "...9"), concatenated, sha256
    sha = {
        name: hashlib.sha256(data).hexdigest()
        for name, data in [("a", b"first file"), ("b", b"second file"), ("c", b"third file")]
    }
    manifest = (
        f"1.2.826.0.1.3680043.2.1125.1 {sha['c']}\n"
        f"1.2.826.0.1.3680043.2.1125.10 {sha['b']}\n"
        f"1.2.826.0.1.3680043.2.1125.9 {sha['a']}\n"
    )
    expected = hashlib.sha256(manifest.encode("utf-8")).hexdigest()
    assert dataset_manifest_sha256(pairs) == expected
    assert dataset_manifest_sha256(reversed(pairs)) == expected  # order of the input does not matter


def test_dataset_manifest_changes_with_any_file_byte_or_uid(tmp_path: Path) -> None:
    (tmp_path / "a.dcm").write_bytes(b"pixels")
    before = dataset_manifest_sha256([("1.2.3", tmp_path / "a.dcm")])
    assert dataset_manifest_sha256([("1.2.4", tmp_path / "a.dcm")]) != before
    (tmp_path / "a.dcm").write_bytes(b"pixelz")
    assert dataset_manifest_sha256([("1.2.3", tmp_path / "a.dcm")]) != before
    # the same instance twice counts twice: the manifest is a list, not a set
    (tmp_path / "a.dcm").write_bytes(b"pixels")
    assert dataset_manifest_sha256([("1.2.3", tmp_path / "a.dcm")] * 2) != before


def test_dependency_versions_walk_requirements_transitively(monkeypatch: pytest.MonkeyPatch) -> None:
    graph = {
        "sitecal": ["Alpha>=1", "beta_pkg; python_version >= '3.0'", "docs-tool; extra == 'docs'", "ghost"],
        "alpha": ["Gamma.Lib (>=2)", "sitecal"],  # a cycle back to the root
        "beta-pkg": ["gamma-lib", "absent-on-this-os; sys_platform == 'win32'"],
        "gamma-lib": [],
        "docs-tool": ["never-followed"],
    }
    versions = {"alpha": "1.0", "beta-pkg": "2.0", "gamma-lib": "3.1", "docs-tool": "9"}

    class Dist:
        def __init__(self, name: str) -> None:
            self.version = versions[name]

    def requires(name: str) -> list[str]:
        return graph[name]

    def distribution(name: str) -> Any:
        if name not in versions:
            raise PackageNotFoundError(name)
        return Dist(name)

    monkeypatch.setattr(provenance, "requires", requires)
    monkeypatch.setattr(provenance, "distribution", distribution)
    # names normalised (PEP 503) and sorted; extras not followed; a missing unconditional requirement
    # is recorded, a missing one behind an environment marker does not apply here and is left out
    assert dependency_versions() == {
        "alpha": "1.0",
        "beta-pkg": "2.0",
        "gamma-lib": "3.1",
        "ghost": "not installed",
    }


def test_dependency_versions_of_the_installed_sitecal() -> None:
    versions = dependency_versions()
    assert list(versions) == sorted(versions)
    assert "sitecal" not in versions
    # declared directly, and only reached through others (pydantic -> pydantic-core, matplotlib -> pillow)
    for name in ("numpy", "pydantic", "pydantic-core", "reportlab", "pillow"):
        assert re.fullmatch(r"\d+(\.\d+)*.*", versions[name]), name
    assert all(name == name.lower() and "_" not in name for name in versions)


def test_document_id_depends_on_inputs_and_time_only() -> None:
    inputs = {"protocol": "a" * 64, "model": "b" * 64, "labels": "c" * 64, "dataset_manifest": "d" * 64}
    kwargs: dict[str, Any] = dict(
        sitecal_version="0.1.0",
        created_utc="2026-12-02T18:00:00Z",
        command_line="sitecal run p.yaml",
        run_folder="demo-20261202T180000Z",
        seeds={"split": 1, "bootstrap": 2},
        model={"name": "m"},
        transforms_sha256="e" * 64,
        device="cpu",
        pseudonym_key="f" * 12,
    )
    one = provenance_document(sha256=inputs, outputs_sha256={"predictions": "1" * 64}, **kwargs)
    two = provenance_document(sha256=inputs, outputs_sha256={"predictions": "2" * 64}, **kwargs)
    assert one["sha256"] == {**inputs, "predictions": "1" * 64}
    assert one["document_id"] == two["document_id"] == document_id(inputs, created_utc=kwargs["created_utc"])
    # by hand: "SC-" + 12 hex digits (upper case) of sha256 of the time and the sorted "name value" lines
    lines = "\n".join([f"created_utc {kwargs['created_utc']}", *(f"{k} {inputs[k]}" for k in sorted(inputs))])
    assert one["document_id"] == "SC-" + hashlib.sha256(lines.encode()).hexdigest()[:12].upper()
    changed = provenance_document(sha256={**inputs, "dataset_manifest": "0" * 64}, **kwargs)
    assert changed["document_id"] != one["document_id"]
    later = provenance_document(sha256=inputs, **{**kwargs, "created_utc": "2026-12-02T18:45:00Z"})
    assert later["document_id"] != one["document_id"]  # a run 45 minutes later is another document
    assert "predictions" not in changed["sha256"]
    assert one["dependencies"] == dependency_versions()


def test_the_model_record_carries_its_architecture_and_no_unknown_field() -> None:
    kwargs: dict[str, Any] = dict(
        sitecal_version="0.1.0",
        created_utc="2026-12-02T18:00:00Z",
        command_line="sitecal run p.yaml",
        run_folder="demo-20261202T180000Z",
        seeds={"split": 1, "bootstrap": 2},
        sha256={"model": "b" * 64},
        transforms_sha256="e" * 64,
        device="cpu",
        pseudonym_key="f" * 12,
    )
    model = {
        "code_sha256": "c" * 64,
        "architecture_args": {"scale": -5.0, "bad": "NaN"},
        "architecture": "package.module:Net",
        "file": "net.safetensors",
        "format": "safetensors",
        "version": "2",
        "name": "m",
    }
    document = provenance_document(model=model, **kwargs)
    assert document["model"] == model
    assert list(document["model"]) == list(provenance.MODEL_FIELDS)  # in the documented order
    assert json.loads(json.dumps(document, allow_nan=False))["model"] == model
    with pytest.raises(ValueError) as raised:
        provenance_document(model={"name": "m", "weights": "w", "args": {}}, **kwargs)
    assert str(raised.value) == (
        "The 'model' parameter of provenance_document takes the fields name, version, format, file, "
        "architecture, architecture_args, code_sha256. Got 'args', 'weights'."
    )
