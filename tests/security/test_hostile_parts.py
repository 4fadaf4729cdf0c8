"""Hostile network parts: a peer's part or sidecar that is edited, forged, deep, huge, or plants text.

A network's central evaluation reads folders of parts the sites sent (:mod:`sitecal.cohort._parts`). The
parts here are written by :func:`write_part` on a small synthetic cohort (no DICOM, no model: seconds),
then altered as a hostile peer would. A peer that holds the network key can seal what it wants
(:func:`reseal`): such parts must still end in exit 2 with a message naming the file and never holding the
peer's text. Every case goes through ``sitecal check --predictions FOLDER``, which reads the parts whole as
``sitecal evaluate`` does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import yaml
from tests.conftest import write_demo_protocol

from sitecal._pseudonym import Pseudonymizer, create_network_key
from sitecal.cli import main
from sitecal.cohort._part_sidecar import MAX_SIDECAR_BYTES, MAX_SIDECAR_DEPTH, json_depth, part_mac
from sitecal.cohort._parts import MAX_PARTS, part_facts, read_parts, write_part
from sitecal.cohort._records import Cohort, Exclusion, Study
from sitecal.cohort.attributes import age_band_labels
from sitecal.protocol import load_protocol

NAME, MRN = "DOE^JANE", "MRN12345678"


@pytest.fixture
def network(tmp_path: Path) -> SimpleNamespace:
    """A network protocol and a folder of two sites' sealed parts (synthetic cohorts)."""
    manifest = SimpleNamespace(dicom_dir=tmp_path / "dicom", labels_csv=tmp_path / "labels.csv")
    template = write_demo_protocol(tmp_path, manifest, n_resamples=50)
    protocol = yaml.safe_load(template.read_text())
    key = tmp_path / "network.key"
    create_network_key(key)
    protocol["privacy"] = {"network_key_file": str(key)}
    path = tmp_path / "central.yaml"
    path.write_text(yaml.safe_dump(protocol, sort_keys=False))
    loaded = load_protocol(path)
    pseudonymize = Pseudonymizer(loaded.pseudonym_key())
    parts = tmp_path / "parts"
    parts.mkdir()
    for i, site in enumerate(("a", "b")):
        write_synthetic_part(parts / f"site-{site}.csv", loaded, pseudonymize, site=site, seed=i)
    return SimpleNamespace(protocol=path, parts=parts, loaded=loaded, pseudonymize=pseudonymize)


def write_synthetic_part(
    path: Path,
    loaded: Any,
    pseudonymize: Pseudonymizer,
    *,
    site: str,
    seed: int,
    n: int = 60,
    exclusions: tuple[Exclusion, ...] = (),
) -> Path:
    """Write a part of ``n`` synthetic studies of ``site`` (every value held by 20 studies); its sidecar."""
    protocol = loaded.protocol
    bands = age_band_labels(protocol.subgroups["age_band"].bands)
    studies = [
        Study(
            study_key=pseudonymize("study", f"{site}-{i}"),
            patient_key=pseudonymize("patient", f"{site}-{i // 2}"),
            files=(),
            relative_path="",
            instance_uids=(),
            attributes={
                "scanner": f"X{i % 3}",
                "site": f"Site {site}",
                "sex": "FM"[i % 2],
                "age_band": bands[1],
            },
            label=i % 3,
        )
        for i in range(n)
    ]
    cohort = Cohort(
        studies=tuple(studies),
        exclusions=exclusions,
        files_found=n + len(exclusions),
        dicom_instances=n,
        n_studies_found=n,
        n_labelled=n,
    )
    logits = np.random.default_rng(seed).normal(size=(n, 3)).astype(np.float32)
    facts = part_facts(protocol, pseudonymize.fingerprint, model_sha256="ab" * 32)
    return write_part(
        path,
        cohort,
        studies,
        logits,
        exclusions,
        facts=facts,
        pseudonymize=pseudonymize,
        min_count_shown=protocol.privacy.min_count_shown,
    )


def reseal(sidecar: Path, pseudonymize: Pseudonymizer, edit: Callable[[dict], None]) -> None:
    """Edit a sidecar and seal it again under the network key, as a hostile site holding it can."""
    document = json.loads(sidecar.read_text())
    edit(document)
    document["mac"] = part_mac(pseudonymize.key, document)
    sidecar.write_text(json.dumps(document))


def _check(network: SimpleNamespace, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["check", str(network.protocol), "--predictions", str(network.parts)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_the_synthetic_parts_are_accepted(network: SimpleNamespace, capsys) -> None:
    code, text = _check(network, capsys)
    assert code == 0, text


def test_a_sidecar_of_100000_nested_lists_is_exit_2_naming_it(network: SimpleNamespace, capsys) -> None:
    sidecar = network.parts / "site-a.csv.part.json"
    sidecar.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    start = time.perf_counter()
    code, text = _check(network, capsys)
    assert time.perf_counter() - start < 10
    assert code == 2
    assert f"{sidecar}: nested deeper than a sidecar is ({MAX_SIDECAR_DEPTH} levels at most)" in text
    assert "RecursionError" not in text and "internal error" not in text


@pytest.mark.parametrize(
    ("data", "message"),
    [
        # one level too deep for a sidecar, well within the size limit
        (b'{"a": ' * (MAX_SIDECAR_DEPTH + 1) + b"1" + b"}" * (MAX_SIDECAR_DEPTH + 1), "nested deeper"),
        (b'{"format": "' + b"x" * MAX_SIDECAR_BYTES + b'"}', "larger than a sidecar can be (1 MiB)"),
        (b"\xff\xfe{}", "cannot read it as JSON (UnicodeDecodeError)"),
        (b'{"format": ', "cannot read it as JSON (JSONDecodeError)"),
        (
            b'{"format": "sitecal-predictions-part/1"}',
            "written by an earlier sitecal, without the network's seal",
        ),
        (b"[]", "not a sitecal predictions part sidecar (sitecal-predictions-part/2)"),
    ],
    ids=["depth-9", "over-1MiB", "not-utf8", "cut-json", "format-1", "not-a-dict"],
)
def test_a_malformed_sidecar_is_exit_2_naming_it(
    network: SimpleNamespace, capsys, data: bytes, message: str
) -> None:
    sidecar = network.parts / "site-b.csv.part.json"
    sidecar.write_bytes(data)
    code, text = _check(network, capsys)
    assert code == 2
    assert f"{sidecar}: " in text and message in text


def test_depth_is_counted_outside_strings_only() -> None:
    assert json_depth(b'{"a": "[[[[[[[[[[[[[[[[[[[[", "b": [{"c": "}}}]]]"}]}') == 3
    assert json_depth(b'["\\"[[[["]') == 1  # an escaped quote does not end the string
    # escaped quotes to the end of 1 MiB (no string closes): a backtracking scan would take hours
    start = time.perf_counter()
    assert json_depth(b'"\\' * (MAX_SIDECAR_BYTES // 2)) == 0
    assert json_depth(b"[" + b'"\\' * (MAX_SIDECAR_BYTES // 2 - 1)) == 1
    assert time.perf_counter() - start < 2


def test_a_fifo_sidecar_is_refused_without_blocking(network: SimpleNamespace, capsys) -> None:
    sidecar = network.parts / "site-b.csv.part.json"
    sidecar.unlink()
    os.mkfifo(sidecar)
    code, text = _check(network, capsys)
    assert code == 2
    assert f"{sidecar}: cannot read it (not a regular file (FIFO))" in text


def test_a_removed_seal_or_a_seal_of_another_key_is_refused(network: SimpleNamespace, capsys) -> None:
    sidecar = network.parts / "site-a.csv.part.json"
    document = json.loads(sidecar.read_text())
    del document["mac"]
    sidecar.write_text(json.dumps(document))
    code, text = _check(network, capsys)
    assert code == 2 and f"{sidecar}: its seal (mac) does not match its content under the network key" in text

    other = Pseudonymizer(b"0" * 64)  # same fingerprint claimed, another key: the seal fails
    reseal(sidecar, other, lambda d: None)
    code, text = _check(network, capsys)
    assert code == 2 and f"{sidecar}: its seal (mac) does not match" in text


def test_a_name_in_a_key_is_refused_and_never_shown(network: SimpleNamespace, capsys) -> None:
    part = network.parts / "site-a.csv"
    lines = part.read_text().splitlines(keepends=True)
    lines[1] = f"{NAME} {MRN}," + lines[1].split(",", 1)[1]
    part.write_text("".join(lines))
    reseal(part.with_name(part.name + ".part.json"), network.pseudonymize, _resha(part))
    code, text = _check(network, capsys)
    assert code == 2
    assert f"{part}: line 2: study_key or patient_key is not a sitecal pseudonym" in text
    assert NAME not in text and MRN not in text


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\x00" * 10, "its columns are not study_key, patient_key, label"),
        (b"study_key," + b"x" * (2 << 20) + b"\n", "not a CSV that sitecal writes (_LineTooLong)"),
        (b"study_key,\xff\xfe\n", "not a CSV that sitecal writes (UnicodeDecodeError)"),
    ],
    ids=["nul", "2MiB-line", "not-utf8"],
)
def test_a_sealed_part_that_is_no_csv_is_exit_2(
    network: SimpleNamespace, capsys, content: bytes, message: str
) -> None:
    part = network.parts / "site-b.csv"
    part.write_bytes(content)
    reseal(part.with_name(part.name + ".part.json"), network.pseudonymize, _resha(part))
    code, text = _check(network, capsys)
    assert code == 2 and f"{part}: {message}" in text


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["flow"].update(files_found=True), "field flow is missing or not counts"),
        (lambda d: d["flow"].update(studies=-1), "field flow is missing or not counts"),
        (lambda d: d["flow"].update(labelled=1.5), "field flow is missing or not counts"),
        (lambda d: d.update(rows=10**30), "0 rows, but its sidecar says"),
        (lambda d: d.update(model_sha256=f"{NAME} {MRN}"), "field model_sha256 is missing or not a sha256"),
        (lambda d: d.update(note=NAME), "its fields are not those of a sidecar sitecal writes"),
        (
            lambda d: d["exclusions"].append({"code": f"scan/{MRN}", "unit": "file", "count": 1}),
            "exclusions[0]: its reason code is not one of this sitecal's (the code is not shown)",
        ),
        (
            lambda d: d["exclusions"].append({"code": "scan/not-dicom", "unit": NAME, "count": 1}),
            "exclusions[0]: its unit is not one of file, image",
        ),
        (
            lambda d: d["exclusions"].append({"code": "scan/not-dicom", "unit": "file", "count": 10**7 + 1}),
            "the parts count more than 10000000 exclusions together",
        ),
    ],
    ids=["bool", "negative", "float", "rows", "model", "extra-field", "code", "unit", "too-many"],
)
def test_a_sealed_sidecar_with_bad_fields_is_exit_2_and_shows_none(
    network: SimpleNamespace, capsys, edit: Callable[[dict], None], message: str
) -> None:
    sidecar = network.parts / "site-b.csv.part.json"
    if "rows" in message:
        (network.parts / "site-b.csv").write_text(
            (network.parts / "site-b.csv").read_text().splitlines()[0] + "\n"
        )
        reseal(sidecar, network.pseudonymize, _resha(network.parts / "site-b.csv"))
    reseal(sidecar, network.pseudonymize, edit)
    code, text = _check(network, capsys)
    assert code == 2
    assert message in text
    assert NAME not in text and MRN not in text


def test_more_parts_than_a_network_has_are_refused_before_any_is_read(
    network: SimpleNamespace, capsys
) -> None:
    for i in range(MAX_PARTS):
        (network.parts / f"x{i:04d}.csv.part.json").touch()
    code, text = _check(network, capsys)
    assert code == 2 and f"{MAX_PARTS + 2} predictions parts, more than {MAX_PARTS}" in text


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="peak memory read from /proc (Linux)")
def test_ten_million_exclusions_are_shared_records_in_bounded_memory(tmp_path: Path) -> None:
    """The bound of exclusions a network may count is met in bounded memory (one record per reason).

    The child's peak is its VmHWM (reset by exec, unlike getrusage's ru_maxrss, which keeps the forking
    pytest's). 10**7 records of their own would take over 1.5 GiB; 10**7 references take 80 MB.
    """
    script = f"""
import re, sys
sys.path.insert(0, {str(Path(__file__).parents[2])!r})
from pathlib import Path
from tests.security.test_hostile_parts import network_for_memory
read = network_for_memory(Path({str(tmp_path)!r}))
print(len(read.exclusions), len({{id(e) for e in read.exclusions}}))
print(re.search(r"VmHWM:\\s+(\\d+) kB", Path("/proc/self/status").read_text()).group(1))
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    (count, distinct), (peak_kib,) = (map(int, line.split()) for line in out.stdout.splitlines())
    assert (count, distinct) == (10**7 - 1, 1)
    # the interpreter, numpy, torch-free sitecal and the protocol take about 200 MiB
    assert peak_kib < 500 * 1024, peak_kib


def network_for_memory(root: Path) -> Cohort:
    """A one-part network whose sidecar counts 10**7 - 1 exclusions of one reason, read back."""
    manifest = SimpleNamespace(dicom_dir=root / "dicom", labels_csv=root / "labels.csv")
    protocol = yaml.safe_load(write_demo_protocol(root, manifest).read_text())
    key = root / "network.key"
    create_network_key(key)
    protocol["privacy"] = {"network_key_file": str(key)}
    path = root / "central.yaml"
    path.write_text(yaml.safe_dump(protocol, sort_keys=False))
    loaded = load_protocol(path)
    pseudonymize = Pseudonymizer(loaded.pseudonym_key())
    (root / "parts").mkdir()
    part = root / "parts" / "site.csv"
    write_synthetic_part(part, loaded, pseudonymize, site="a", seed=0)
    row = {"code": "scan/not-dicom", "unit": "file", "count": 10**7 - 1}
    reseal(part.with_name(part.name + ".part.json"), pseudonymize, lambda d: d["exclusions"].append(row))
    return read_parts(
        root / "parts",
        facts=part_facts(loaded.protocol, pseudonymize.fingerprint, model_sha256=None),
        subgroups=loaded.protocol.subgroups,
        min_count_shown=loaded.protocol.privacy.min_count_shown,
        pseudonymize=pseudonymize,
    )


def _resha(part: Path) -> Callable[[dict], None]:
    """An edit that records ``part``'s sha256 in its sidecar (what a forger holding the key would do)."""
    import hashlib

    digest = hashlib.sha256(part.read_bytes()).hexdigest()
    return lambda d: d.update(csv_sha256=digest)
