"""The logit cache: reruns perform no inference, and a run killed half-way resumes to the same results."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from tests.conftest import REPO, assert_exit_is_the_verdicts, write_demo_protocol

from sitecal._pseudonym import Pseudonymizer
from sitecal.cli import main
from sitecal.demo import generate_demo
from sitecal.inference import LogitCache, image_key, predict_files
from sitecal.inference.models import LoadedModel

SECRET = b"s" * 32
IDENTITY = {"model": {"sha256": "a" * 64}, "transforms_sha256": "b" * 64}


def test_chunks_round_trip_and_a_torn_chunk_is_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = LogitCache(tmp_path, IDENTITY, n_classes=2, secret=SECRET)
    cache.store(["k1", "k2"], np.array([[0.5, -1.0], [2.0, 3.0]]))
    cache.store(["k3"], np.array([[1.0, 1.5]]))
    (cache.folder / "chunk-torn.npz").write_bytes(b"PK\x03\x04 not a whole zip")
    loaded = cache.load()
    assert sorted(loaded) == ["k1", "k2", "k3"]
    np.testing.assert_array_equal(loaded["k2"], np.float32([2.0, 3.0]))
    assert caplog.messages == [
        f"logit cache {cache.folder}: ignored 1 of 3 chunks (1 truncated or unreadable) and moved them to "
        "quarantine/; their images are computed again"
    ]
    assert (cache.folder / "quarantine" / "chunk-torn.npz").is_file()


def test_the_folder_is_named_by_the_identity_and_the_site_key(tmp_path: Path) -> None:
    cache = LogitCache(tmp_path, IDENTITY, n_classes=2, secret=SECRET)
    digest = hashlib.sha256(
        json.dumps({**IDENTITY, "n_classes": 2}, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()
    assert cache.folder == tmp_path / f"{digest}-{Pseudonymizer(SECRET).fingerprint}"
    assert json.loads((cache.folder / "identity.json").read_text()) == {**IDENTITY, "n_classes": 2}
    others = {
        LogitCache(tmp_path, {**IDENTITY, "transforms_sha256": "c" * 64}, 2, secret=SECRET).folder,
        LogitCache(tmp_path, IDENTITY, 3, secret=SECRET).folder,
        LogitCache(tmp_path, IDENTITY, 2, secret=b"t" * 32).folder,
    }
    assert len(others) == 3 and cache.folder not in others


def test_a_damaged_identity_file_is_rewritten(tmp_path: Path) -> None:
    cache = LogitCache(tmp_path, IDENTITY, n_classes=2, secret=SECRET)
    cache.store(["k1"], np.array([[0.5, -1.0]]))
    (cache.folder / "identity.json").write_bytes(b"")
    again = LogitCache(tmp_path, IDENTITY, n_classes=2, secret=SECRET)
    assert json.loads((again.folder / "identity.json").read_text()) == {**IDENTITY, "n_classes": 2}
    assert list(again.load()) == ["k1"]


def test_many_chunks_are_merged_into_one_without_loss(tmp_path: Path) -> None:
    cache = LogitCache(tmp_path, IDENTITY, n_classes=3, secret=SECRET)
    expected = {}
    for i in range(70):
        row = np.array([[i, i + 0.25, -i]], dtype=np.float32)
        cache.store([f"k{i}"], row)
        expected[f"k{i}"] = row[0]
    first = cache.load()
    assert len(list(cache.folder.glob("chunk-*.npz"))) == 1
    second = cache.load()
    for loaded in (first, second):
        assert loaded.keys() == expected.keys()
        for key, row in expected.items():
            np.testing.assert_array_equal(loaded[key], row)


def test_image_key_is_keyed_and_order_free() -> None:
    a, b = Pseudonymizer(b"a" * 32), Pseudonymizer(b"b" * 32)
    x, y = ("1.2.3", "ab" * 32), ("1.2.4", "cd" * 32)
    assert image_key(a, [x, y]) == image_key(a, [y, x])
    assert image_key(a, [x]) != image_key(b, [x])
    assert image_key(a, [x]) != image_key(a, [("1.2.3", "ef" * 32)])  # same UID, other file content
    assert "1.2.3" not in image_key(a, [x]) and len(image_key(a, [x])) == 64


class _Refuses(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise AssertionError("the model was called")


def test_cached_images_are_neither_read_nor_inferred(tmp_path: Path) -> None:
    cache = LogitCache(tmp_path, IDENTITY, n_classes=2, secret=SECRET)
    cache.store(["k1", "k2"], np.array([[0.0, 1.0], [0.0, -1.0]]))
    model = LoadedModel(module=_Refuses(), name="m", format="torchscript", sha256="a" * 64, path=tmp_path)
    # the files do not exist: reading them would be an exclusion, calling the model an AssertionError
    missing = [tmp_path / "gone-1.dcm", tmp_path / "gone-2.dcm"]
    result = predict_files(model, missing, lambda x: x, n_classes=2, cache=cache, keys=["k2", "k1"])
    assert result.failures == () and result.n_cached == 2 and result.n_computed == 0
    np.testing.assert_array_equal(result.logits, np.float32([[0.0, -1.0], [0.0, 1.0]]))


@pytest.fixture(scope="module")
def cohort(tmp_path_factory: pytest.TempPathFactory):
    return generate_demo(tmp_path_factory.mktemp("cache-data"), n_studies=160, seed=11)


def _protocol(root: Path, cohort, **inputs: object) -> Path:
    return write_demo_protocol(
        root, cohort, n_resamples=50, calibration={"min_group_size": 20}, inputs={"num_workers": 0, **inputs}
    )


def _run(path: Path) -> Path:
    code = main(["run", str(path), "--no-progress", "--workers", "1"])
    folder = max((path.parent / "reports").glob("demo-*"))
    assert_exit_is_the_verdicts(code, folder)
    return folder


@pytest.mark.slow
def test_rerun_with_other_statistics_performs_no_inference(
    tmp_path: Path, cohort, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _run(_protocol(tmp_path, cohort))
    assert json.loads((first / "provenance.json").read_text())["logits"]["cached"] == 0
    import yaml

    path = tmp_path / "protocol.yaml"
    protocol = yaml.safe_load(path.read_text())
    protocol["evaluation"]["bootstrap"]["n_resamples"] = 80
    protocol["acceptance"][0]["below"] = 0.25
    protocol["subgroups"].pop("sex_age", None)  # the intersection built on age_band goes with it
    protocol["subgroups"].pop("age_band")
    path.write_text(yaml.safe_dump(protocol, sort_keys=False))
    from sitecal.demo.model import DemoNet

    monkeypatch.setattr(DemoNet, "forward", _Refuses.forward)
    second = _run(path)
    logits = json.loads((second / "provenance.json").read_text())["logits"]
    assert logits["computed"] == 0 and logits["cached"] > 100
    assert (first / "predictions.csv").read_bytes() == (second / "predictions.csv").read_bytes()


@pytest.mark.slow
def test_a_killed_run_resumes_and_matches_an_uninterrupted_one(tmp_path: Path, cohort) -> None:
    import shutil

    import yaml

    cache = tmp_path / "cache"
    path = _protocol(tmp_path, cohort, batch_size=8, logit_cache_dir=str(cache))
    protocol = yaml.safe_load(path.read_text())
    protocol["model"]["architecture"] = "tests.slow_model:SlowDemoNet"  # DemoNet, slower per batch
    path.write_text(yaml.safe_dump(protocol, sort_keys=False))
    whole = _run(path)
    shutil.rmtree(cache)

    process = subprocess.Popen(
        [sys.executable, "-m", "sitecal.cli", "run", str(path), "--no-progress", "--workers", "1"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 180
    chunks: list[Path] = []
    while len(chunks) < 4 and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.02)
        chunks = list(cache.glob("*/chunk-*.npz"))
    still_running = process.poll() is None
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert still_running, "the run ended before it could be killed half-way"
    done = len(list(cache.glob("*/chunk-*.npz")))
    assert 4 <= done < 160 // 8
    (killed,) = set((tmp_path / "reports").glob("demo-*")) - {whole}
    assert not (killed / "evaluation.json").exists()

    resumed = _run(path)
    assert resumed not in (whole, killed)
    logits = json.loads((resumed / "provenance.json").read_text())["logits"]
    assert logits["cached"] >= 8 * done - 8 and logits["computed"] > 0  # a chunk may hold a failed image less
    for name in ("predictions.csv", "cohort.csv", "exclusions.csv", "evaluation.json", "calibration.json"):
        assert (resumed / name).read_bytes() == (whole / name).read_bytes(), name


@pytest.mark.slow
def test_a_file_rewritten_under_the_same_uids_is_read_again(tmp_path: Path) -> None:
    """The key holds each file's sha256: other pixels under an old SOPInstanceUID are not taken from the
    cache (a generator reusing UIDs, or a re-export, would otherwise get another image's logits)."""
    import csv

    import pydicom

    cohort = generate_demo(tmp_path / "data", n_studies=80, seed=12)
    path = _protocol(tmp_path, cohort)
    first = _run(path)
    target = next(p for p in sorted(cohort.dicom_dir.rglob("*.dcm")) if p.name not in cohort.truncated_files)
    ds = pydicom.dcmread(target)
    pixels = ds.pixel_array
    ds.PixelData = (pixels.max() - pixels).astype(pixels.dtype).tobytes()  # same UIDs, other image
    ds.save_as(target)
    second = _run(path)
    logits = json.loads((second / "provenance.json").read_text())["logits"]

    def rows(folder: Path) -> dict[str, list[str]]:
        with open(folder / "predictions.csv", newline="") as f:
            return {r["study_key"]: list(r.values())[1:] for r in csv.DictReader(f)}

    before, after = rows(first), rows(second)
    assert logits == {"computed": 1, "cached": len(before) - 1}
    assert before.keys() == after.keys()
    assert sum(before[k] != after[k] for k in before) == 1
