"""The logit cache reuses a logit only for the same model, code, transforms and site, and survives bad chunks.

Each attack has a control that shows the cache would otherwise serve the images (a second run of the
unchanged model takes every logit from it), so a test cannot pass because nothing was cached.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from tests.security.cache_nets import ScaledNet

from sitecal.inference import LoadedModel, LogitCache, cache_identity, load_model, predict_files
from sitecal.protocol import ModelSettings
from sitecal.provenance import MODEL_FIELDS

SITE = b"site-a-secret-" * 3
OTHER_SITE = b"site-b-secret-" * 3
TRANSFORMS = "t" * 64
N_IMAGES = 6


def _settings(weights: Path, architecture: str = "tests.security.cache_nets:ScaledNet", **args: object):
    return ModelSettings(
        format="safetensors",
        path=str(weights),
        architecture=architecture,
        architecture_args=args,
        class_names=["negative", "positive"],
    )


@pytest.fixture
def weights(tmp_path: Path) -> Path:
    path = tmp_path / "net.safetensors"
    torch.manual_seed(0)
    save_file(ScaledNet().state_dict(), path)
    return path


@pytest.fixture
def images(tmp_path: Path) -> list[Path]:
    rng = np.random.default_rng(0)
    paths = []
    for i in range(N_IMAGES):
        path = tmp_path / f"image-{i}.npy"
        np.save(path, rng.normal(size=4).astype(np.float32))
        paths.append(path)
    return paths


def _read(path: str) -> torch.Tensor:
    return torch.from_numpy(np.load(path))


def _cache(root: Path, model: LoadedModel, secret: bytes = SITE) -> LogitCache:
    return LogitCache(
        root / "cache", cache_identity(model.identity(), transforms_sha256=TRANSFORMS), 2, secret=secret
    )


def _predict(model: LoadedModel, images: list[Path], cache: LogitCache, batch_size: int = 32):
    keys = [f"key-{p.stem}" for p in images]
    return predict_files(model, images, _read, n_classes=2, batch_size=batch_size, cache=cache, keys=keys)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def _ignored(cache: LogitCache, n: int, total: int, reasons: str) -> str:
    chunks = "chunk" if total == 1 else "chunks"  # "1 of 1 chunk", "2 of 3 chunks"
    return (
        f"logit cache {cache.folder}: ignored {n} of {total} {chunks} ({reasons}) and moved them to "
        "quarantine/; their images are computed again"
    )


@pytest.mark.timeout(60)
def test_same_weights_under_other_architecture_args_reuse_no_logit(
    tmp_path: Path, weights: Path, images: list[Path]
) -> None:
    plain = load_model(_settings(weights), weights)
    flipped = load_model(_settings(weights, scale=-5.0), weights)
    assert plain.sha256 == flipped.sha256 and plain.code_sha256 == flipped.code_sha256  # same file, code
    assert (plain.identity()["architecture_args"], flipped.identity()["architecture_args"]) == (
        "{}",
        '{"scale":-5.0}',
    )
    first = _predict(plain, images, _cache(tmp_path, plain))
    again = _predict(plain, images, _cache(tmp_path, plain))  # control: the cache serves the same model
    other = _predict(flipped, images, _cache(tmp_path, flipped))
    assert (first.n_computed, again.n_cached, other.n_cached, other.n_computed) == (6, 6, 0, 6)
    np.testing.assert_allclose(other.logits, -5 * first.logits, rtol=1e-6)
    assert _cache(tmp_path, plain).folder != _cache(tmp_path, flipped).folder


_SOURCE = """import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x)
"""


@pytest.mark.timeout(60)
def test_an_edited_architecture_module_is_another_identity(
    tmp_path: Path, weights: Path, images: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    code = tmp_path / "code"
    code.mkdir()
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # a stale .pyc of the same size and second
    monkeypatch.syspath_prepend(str(code))
    module_file = code / "sitecal_test_edited_net.py"
    module_file.write_text(_SOURCE)
    settings = _settings(weights, architecture="sitecal_test_edited_net:Net")
    before = load_model(settings, weights)
    first = _predict(before, images, _cache(tmp_path, before))

    module_file.write_text(_SOURCE.replace("return self.fc(x)", "return -5 * self.fc(x)"))  # one line
    monkeypatch.delitem(sys.modules, "sitecal_test_edited_net")
    after = load_model(settings, weights)
    old, new = before.identity(), after.identity()
    assert [key for key in old if old[key] != new[key]] == ["code_sha256"]
    second = _predict(after, images, _cache(tmp_path, after))
    assert (first.n_computed, second.n_cached, second.n_computed) == (6, 0, 6)
    np.testing.assert_allclose(second.logits, -5 * first.logits, rtol=1e-6)


@pytest.mark.timeout(60)
def test_a_chunk_rewritten_with_other_logits_is_ignored_warned_once_and_recomputed(
    tmp_path: Path, weights: Path, images: list[Path], caplog: pytest.LogCaptureFixture
) -> None:
    model = load_model(_settings(weights), weights)
    cache = _cache(tmp_path, model)
    first = _predict(model, images, cache, batch_size=2)
    chunks = sorted(cache.folder.glob("chunk-*.npz"))
    assert len(chunks) == 3
    for chunk in chunks[:2]:  # a valid file with the keys and MAC it had, other logits
        with np.load(chunk) as npz:
            keys, logits, mac = npz["keys"], npz["logits"], npz["mac"]
        np.savez(chunk, keys=keys, logits=logits + 3, mac=mac)
    caplog.set_level(logging.WARNING)
    second = _predict(model, images, cache, batch_size=2)
    assert (second.n_cached, second.n_computed) == (2, 4)
    np.testing.assert_allclose(second.logits, first.logits, rtol=1e-6)
    reason = "2 failing verification: altered, or written under another site key"
    assert _warnings(caplog) == [_ignored(cache, 2, 3, reason)]
    assert "image-" not in caplog.text and "key-" not in caplog.text
    assert sorted(p.name for p in (cache.folder / "quarantine").iterdir()) == [c.name for c in chunks[:2]]
    caplog.clear()
    third = _predict(model, images, cache, batch_size=2)
    assert (third.n_cached, _warnings(caplog)) == (6, [])  # quarantined: not met again


@pytest.mark.timeout(60)
def test_empty_and_truncated_chunks_are_ignored_and_quarantined(
    tmp_path: Path, weights: Path, images: list[Path], caplog: pytest.LogCaptureFixture
) -> None:
    model = load_model(_settings(weights), weights)
    cache = _cache(tmp_path, model)
    first = _predict(model, images, cache, batch_size=1)
    chunks = sorted(cache.folder.glob("chunk-*.npz"))
    assert len(chunks) == 6
    chunks[0].write_bytes(b"")  # what a full disk or a crashed copy leaves: EOFError in np.load
    for chunk, keep in zip(chunks[1:4], (10, 0.5, -1), strict=True):
        data = chunk.read_bytes()
        chunk.write_bytes(data[: int(len(data) * keep) if isinstance(keep, float) else keep])
    caplog.set_level(logging.WARNING)
    second = _predict(model, images, cache, batch_size=1)
    assert (second.n_cached, second.n_computed) == (2, 4)
    np.testing.assert_allclose(second.logits, first.logits, rtol=1e-6)
    assert _warnings(caplog) == [_ignored(cache, 4, 6, "1 empty; 3 truncated or unreadable")]
    assert not any(chunk.exists() for chunk in chunks[:4])
    assert sorted(p.name for p in (cache.folder / "quarantine").iterdir()) == [c.name for c in chunks[:4]]
    caplog.clear()
    assert (_predict(model, images, cache, batch_size=1).n_cached, _warnings(caplog)) == (6, [])


@pytest.mark.timeout(60)
def test_a_chunk_from_another_sites_key_is_ignored(
    tmp_path: Path, weights: Path, images: list[Path], caplog: pytest.LogCaptureFixture
) -> None:
    model = load_model(_settings(weights), weights)
    ours, theirs = _cache(tmp_path, model), _cache(tmp_path, model, secret=OTHER_SITE)
    assert ours.folder != theirs.folder  # two sites sharing a cache root keep apart
    assert _predict(model, images, theirs).n_computed == 6
    assert _predict(model, images, theirs).n_cached == 6  # control: valid under their key
    (chunk,) = theirs.folder.glob("chunk-*.npz")
    shutil.copy(chunk, ours.folder / chunk.name)  # same identity, same image keys, their MAC
    caplog.set_level(logging.WARNING)
    result = _predict(model, images, ours)
    assert (result.n_cached, result.n_computed) == (0, 6)
    reason = "1 failing verification: altered, or written under another site key"
    assert _warnings(caplog) == [_ignored(ours, 1, 1, reason)]
    assert chunk.exists()  # their own folder is left alone


@pytest.mark.timeout(30)
def test_authentic_chunks_of_another_shape_or_non_finite_and_fifos_are_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = LogitCache(tmp_path, {"model": {"sha256": "a" * 64}}, 2, secret=SITE)
    cache.store(["k1"], np.array([[1.0, 2.0]]))

    def forge(name: str, keys: list[str], logits: np.ndarray) -> None:  # with the site key: MAC verifies
        mac = cache._mac(keys, logits)
        np.savez(cache.folder / name, keys=np.asarray(keys), logits=logits, mac=np.asarray(mac))

    forge("chunk-wide.npz", ["k2"], np.float32([[1.0, 2.0, 3.0]]))
    forge("chunk-nan.npz", ["k3"], np.float32([[np.nan, 2.0]]))
    os.mkfifo(cache.folder / "chunk-fifo.npz")  # opening it would block for ever
    caplog.set_level(logging.WARNING)
    assert list(cache.load()) == ["k1"]
    reasons = "1 not a regular file; 1 of another shape or type; 1 with non-finite logits"
    assert _warnings(caplog) == [_ignored(cache, 3, 4, reasons)]


@pytest.mark.timeout(30)
def test_non_finite_rows_are_never_stored(tmp_path: Path) -> None:
    cache = LogitCache(tmp_path, {"model": {"sha256": "a" * 64}}, 2, secret=SITE)
    cache.store(["k1", "k2", "k3"], np.array([[1.0, 2.0], [np.inf, 0.0], [0.0, np.nan]]))
    cache.store(["k4"], np.array([[np.nan, np.nan]]))
    assert len(list(cache.folder.glob("chunk-*.npz"))) == 1
    assert list(cache.load()) == ["k1"]


@pytest.mark.timeout(60)
def test_a_program_is_identified_by_its_file_and_weights_by_file_arguments_and_code(
    tmp_path: Path, weights: Path
) -> None:
    program = tmp_path / "net.ts"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit.script is deprecated in torch 2.13
        torch.jit.save(torch.jit.script(ScaledNet()), str(program))
    settings = ModelSettings(format="torchscript", path=str(program), class_names=["negative", "positive"])
    loaded = load_model(settings, program)
    assert loaded.identity() == {
        "format": "torchscript",
        "sha256": loaded.sha256,
        "version": None,
        "architecture": None,
        "architecture_args": "{}",
        "code_sha256": None,  # the code is in the file, which sha256 covers
    }
    plain = load_model(_settings(weights), weights)
    assert plain.architecture == "tests.security.cache_nets:ScaledNet" and plain.architecture_args == {}
    assert plain.code_sha256 is not None and len(plain.code_sha256) == 64
    odd = load_model(_settings(weights, scale=float("nan"), note="NaN"), weights)
    assert odd.identity()["architecture_args"] == '{"note":"NaN","scale":NaN}'  # NaN and "NaN" apart
    assert odd.record() == {
        "name": "model",
        "version": None,
        "format": "safetensors",
        "file": "net.safetensors",
        "architecture": "tests.security.cache_nets:ScaledNet",
        "architecture_args": {"note": "NaN", "scale": "NaN"},  # strict JSON, for provenance.json
        "code_sha256": plain.code_sha256,
    }
    assert list(odd.record()) == list(MODEL_FIELDS)  # what provenance_document takes
