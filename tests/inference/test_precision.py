"""Mixed precision and ``batch_size: auto`` in predict_files: checked against float32, apart in the cache.

The model is the demo CNN with its shipped weights; its inputs are seeded standard-normal images (what
NormalizeIntensity hands it), looked up by name, so that every study loads and every batch is known.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.special import softmax

from sitecal.demo.model import load_demo_model
from sitecal.inference import LogitCache, PrecisionCheck, cache_identity, predict_files, settle_inference
from sitecal.inference._batch_size import largest_batch
from sitecal.inference._precision import TEMPERATURES, max_probability_change, supported
from sitecal.inference.models import LoadedModel

N_STUDIES = 48
SECRET = b"s" * 32
SETTLE = "sitecal.inference._settle"


class _Images:
    """A transform that gives study ``i`` (its file name) a seeded 1 x 64 x 64 image; counts its reads."""

    def __init__(self, n: int = N_STUDIES, seed: int = 0) -> None:
        self.images = torch.randn(n, 1, 64, 64, generator=torch.Generator().manual_seed(seed))
        self.reads = 0

    def __call__(self, name: str) -> torch.Tensor:
        self.reads += 1
        return self.images[int(Path(name).name)]


def _files(n: int = N_STUDIES) -> list[Path]:
    return [Path(str(i)) for i in range(n)]


def _demo(module: torch.nn.Module | None = None) -> LoadedModel:
    return LoadedModel(
        module=module or load_demo_model(), name="demo", format="in-memory", sha256="", path=Path("-")
    )


def _bare(module: torch.nn.Module, images: torch.Tensor, dtype: torch.dtype | None = None) -> np.ndarray:
    """The module on ``images`` in one batch, in float32 or under CPU autocast to ``dtype``."""
    module.eval()
    with torch.inference_mode(), torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=bool(dtype)):
        return module(images).float().numpy()


# --- the measure -----------------------------------------------------------------------------------------


def test_max_probability_change_by_hand() -> None:
    z = np.array([[0.0, 1.0]])
    moved = np.array([[0.0, 1.01]])
    sigmoid = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    # two classes: softmax([0, z / T])[1] = sigmoid(z / T)
    assert max_probability_change(z, moved, temperatures=(1.0,)) == pytest.approx(
        sigmoid(1.01) - sigmoid(1.0), rel=1e-12
    )
    # over the grid the change is largest at T = 2^(-1/2), where it is 0.0022153 (by the same formula at
    # each T: 0.000693, 0.001472, 0.002084, 0.002215, 0.001962, 0.001562, 0.001174, 0.000857, 0.000615)
    expected = sigmoid(1.01 * math.sqrt(2)) - sigmoid(math.sqrt(2))
    assert expected == pytest.approx(0.0022153, abs=1e-7)
    assert max_probability_change(z, moved) == pytest.approx(expected, rel=1e-12)
    assert TEMPERATURES[0] == 0.25 and TEMPERATURES[-1] == 4.0 and len(TEMPERATURES) == 9


def test_max_probability_change_edges() -> None:
    z = np.array([[0.0, 1.0], [2.0, -1.0]])
    assert max_probability_change(z, z) == 0.0
    assert max_probability_change(z, np.array([[0.0, np.inf], [2.0, -1.0]])) == math.inf
    assert max_probability_change(np.zeros((0, 3)), np.zeros((0, 3))) == 0.0
    with pytest.raises(ValueError, match=r"logits of shapes \(2, 2\) and \(2, 3\)"):
        max_probability_change(z, np.zeros((2, 3)))


def test_which_device_runs_which_precision() -> None:
    cpu, gpu = torch.device("cpu"), torch.device("cuda:1")
    assert supported("float32", cpu) and supported("bfloat16", cpu) and not supported("float16", cpu)
    assert supported("float32", gpu) and supported("float16", gpu)  # no GPU needed to say so
    assert not supported("bfloat16", torch.device("meta"))


# --- batch size ------------------------------------------------------------------------------------------


def test_batch_size_moves_logits_only_in_their_last_bits() -> None:
    """Eval mode: a study's logits do not depend on its batch; kernels may still sum in another order."""
    model, images = _demo(), _Images()
    runs = {bs: predict_files(model, _files(), images, n_classes=3, batch_size=bs) for bs in (1, 7, 16, 32)}
    for bs, result in runs.items():
        assert result.batch_size == bs and not result.failures
        # within float32 rounding of logits up to ~15 (measured: at most 6e-6), never more
        np.testing.assert_allclose(result.logits, runs[32].logits, rtol=0, atol=2e-5)
        assert (result.logits.argmax(1) == runs[32].logits.argmax(1)).all()
    np.testing.assert_allclose(runs[32].logits, _bare(model.module, images.images), rtol=0, atol=2e-5)


def test_a_study_does_not_depend_on_its_batch_mates() -> None:
    """An extreme image beside a study leaves it alone: batch norm uses running statistics in eval mode."""
    model, images = _demo(), _Images()
    model.module.train()  # predict_files puts it in eval mode, and gives it back in train mode
    plain = predict_files(model, _files(), images, n_classes=3, batch_size=16)
    assert model.module.training
    images.images[1] *= 1000.0  # study 1 shares its batch with studies 0 and 2..15
    loud = predict_files(model, _files(), images, n_classes=3, batch_size=16)
    others = np.arange(N_STUDIES) != 1
    np.testing.assert_allclose(loud.logits[others], plain.logits[others], rtol=0, atol=2e-5)
    # in train mode the same neighbour moves every logit of its batch by far more
    with torch.inference_mode():
        trained = model.module.train()(images.images[:16]).numpy()
    assert np.abs(trained[0] - plain.logits[0]).max() > 0.1


def test_auto_is_the_default_batch_on_a_cpu_and_changes_no_bit(caplog: pytest.LogCaptureFixture) -> None:
    model, images = _demo(), _Images()
    fixed = predict_files(model, _files(), images, n_classes=3)
    images.reads = 0
    with caplog.at_level(logging.INFO, logger=SETTLE):
        auto = predict_files(model, _files(), images, n_classes=3, batch_size="auto")
    assert fixed.batch_size == auto.batch_size == 32
    assert np.array_equal(fixed.logits, auto.logits)
    assert images.reads == N_STUDIES  # nothing probed: each study read once, by the run
    assert "inputs.batch_size auto: 32 on cpu" in caplog.messages


def test_largest_batch_doubles_until_memory_runs_out() -> None:
    tried: list[int] = []

    def fits_24(size: int) -> None:
        tried.append(size)
        if size > 24:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    assert largest_batch(fits_24, fallback=32) == 16
    assert tried == [1, 2, 4, 8, 16, 32]
    assert largest_batch(lambda size: None, fallback=32) == 256  # the cap
    assert largest_batch(lambda size: None, cap=100, fallback=32) == 64


def test_largest_batch_floor_and_a_failing_model() -> None:
    def never_fits(size: int) -> None:
        raise torch.cuda.OutOfMemoryError("CUDA out of memory")

    def fails(size: int) -> None:
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")

    def fails_above_4(size: int) -> None:
        if size > 4:
            raise RuntimeError("a failure that only a larger batch meets")

    assert largest_batch(never_fits, fallback=32) == 1  # the floor: the run reports each study
    assert largest_batch(fails, fallback=32) == 32  # the run isolates the model's failure study by study
    assert largest_batch(fails_above_4, fallback=32) == 4


# --- precision -------------------------------------------------------------------------------------------


def test_bfloat16_within_its_tolerance_runs_in_bfloat16() -> None:
    model, images = _demo(), _Images()
    float32 = predict_files(model, _files(), images, n_classes=3)
    result = predict_files(
        model, _files(), images, n_classes=3, precision="bfloat16", precision_tolerance=0.5
    )
    check = result.precision_check
    assert (check.requested, check.used, check.outcome, check.n_studies) == (
        "bfloat16",
        "bfloat16",
        "passed",
        32,
    )
    # the check's figure, recomputed independently: the first 32 studies in one batch, float32 against
    # CPU autocast, softmax from scipy at each temperature of the grid
    reference = _bare(model.module, images.images[:32])
    amp = _bare(model.module, images.images[:32], torch.bfloat16)
    reference, amp = reference.astype(np.float64), amp.astype(np.float64)
    expected = max(
        np.abs(softmax(reference / t, axis=1) - softmax(amp / t, axis=1)).max() for t in TEMPERATURES
    )
    assert check.max_change == pytest.approx(expected, rel=1e-9)
    assert 1e-3 < check.max_change <= 0.5  # bfloat16 keeps 8 bits of mantissa: a visible change
    assert not np.array_equal(result.logits, float32.logits)
    assert (result.logits.argmax(1) == float32.logits.argmax(1)).mean() > 0.9
    assert check.to_dict() == {
        "requested": "bfloat16",
        "used": "bfloat16",
        "outcome": "passed",
        "max_change": check.max_change,
        "tolerance": 0.5,
        "n_studies": 32,
        "temperatures": list(TEMPERATURES),
    }


def test_bfloat16_beyond_its_tolerance_falls_back_to_float32(caplog: pytest.LogCaptureFixture) -> None:
    model, images = _demo(), _Images()
    float32 = predict_files(model, _files(), images, n_classes=3)
    with caplog.at_level(logging.WARNING, logger=SETTLE):
        result = predict_files(
            model, _files(), images, n_classes=3, precision="bfloat16", precision_tolerance=1e-6
        )
    check = result.precision_check
    assert (check.requested, check.used, check.outcome) == ("bfloat16", "float32", "exceeded")
    assert np.array_equal(result.logits, float32.logits)  # the float32 run, to the bit
    assert caplog.messages == [
        f"inputs.precision bfloat16 changed a class probability by up to {check.max_change:.3g} against "
        "float32 (temperatures 0.25 to 4, 32 studies), above inputs.precision_tolerance 1e-06: the model "
        "runs in float32"
    ]


def test_the_default_tolerance_refuses_bfloat16_for_the_demo_model() -> None:
    """The demo CNN's logits reach ~15: bfloat16 rounding moves its probabilities by more than 1e-3."""
    result = predict_files(_demo(), _files(), _Images(), n_classes=3, precision="bfloat16")
    assert result.precision_check.outcome == "exceeded" and result.precision_check.tolerance == 1e-3
    assert result.precision_check.max_change is not None and result.precision_check.max_change > 5e-3


def test_float16_on_a_cpu_runs_in_float32(caplog: pytest.LogCaptureFixture) -> None:
    images = _Images()
    with caplog.at_level(logging.WARNING, logger=SETTLE):
        result = predict_files(_demo(), _files(), images, n_classes=3, precision="float16")
    assert result.precision_check == PrecisionCheck("float16", "float32", "unsupported", None, 1e-3, 0)
    assert images.reads == N_STUDIES  # no check was run
    assert caplog.messages == [
        "inputs.precision float16 cannot run on cpu (float16 needs a CUDA GPU; bfloat16 a CPU or a GPU that "
        "has it): the model runs in float32"
    ]


class _NoAutocast(torch.nn.Module):
    """Linear logits, and an error under autocast (an operator without a reduced-precision kernel)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_autocast_enabled("cpu"):
            raise NotImplementedError("no bfloat16 kernel for this operator")
        return torch.stack([x.mean(dim=(1, 2, 3)), -x.mean(dim=(1, 2, 3))], dim=1)


class _OverflowsInAutocast(_NoAutocast):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_autocast_enabled("cpu"):
            return torch.full((len(x), 2), math.inf)
        return super().forward(x)


def test_a_model_that_fails_under_autocast_runs_in_float32(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=SETTLE):
        result = predict_files(_demo(_NoAutocast()), _files(), _Images(), n_classes=2, precision="bfloat16")
    assert (result.precision_check.used, result.precision_check.outcome) == ("float32", "model_failed")
    assert not result.failures and len(result.ok) == N_STUDIES
    assert caplog.messages == [
        "the model failed under inputs.precision bfloat16 on 32 of 32 studies it runs in float32 "
        "(NotImplementedError: no bfloat16 kernel for this operator): it runs in float32"
    ]


def test_non_finite_logits_under_autocast_exceed_any_tolerance() -> None:
    result = predict_files(
        _demo(_OverflowsInAutocast()), _files(), _Images(), n_classes=2, precision="bfloat16"
    )
    check = result.precision_check
    assert (check.used, check.outcome, check.max_change) == ("float32", "exceeded", math.inf)
    assert not result.failures


def test_a_check_made_once_is_taken_as_it_is() -> None:
    """A shard of a larger run gets the run's check: it reads no study to check again."""
    model, images = _demo(), _Images()
    size, check = settle_inference(
        model, _files(), images, n_classes=3, precision="bfloat16", tolerance=0.5, batch_size="auto"
    )
    assert size == 32 and check.used == "bfloat16" and images.reads == 32
    whole = predict_files(model, _files(), images, n_classes=3, precision="bfloat16", precision_tolerance=0.5)
    assert whole.precision_check == check
    images.reads = 0
    shard = predict_files(model, _files()[16:], images, n_classes=3, batch_size=size, precision_check=check)
    assert images.reads == N_STUDIES - 16 and shard.precision_check == check
    # one batch of the 32 studies under CPU autocast, as the shard ran them
    assert np.array_equal(shard.logits, _bare(model.module, images.images[16:], torch.bfloat16))


def test_a_check_of_a_precision_the_device_cannot_run_is_refused() -> None:
    check = PrecisionCheck("float16", "float16", "passed", 1e-4, 1e-3, 32)
    with pytest.raises(
        ValueError, match="precision_check' parameter of predict_files says float16, which cpu"
    ):
        predict_files(_demo(), _files(), _Images(), n_classes=3, precision_check=check)


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("precision", "fp16", "must be one of 'float32', 'float16', 'bfloat16'. Got 'fp16'."),
        ("precision_tolerance", 0.0, "must be a number in (0, 1). Got 0.0."),
        ("batch_size", "max", "must be an int >= 1 or 'auto'. Got 'max'."),
        ("batch_size", 0, "must be an int >= 1 or 'auto'. Got 0."),
    ],
)
def test_bad_options_are_named(option: str, value: object, message: str) -> None:
    with pytest.raises(ValueError) as info:
        predict_files(_demo(), _files(), _Images(), n_classes=3, **{option: value})  # type: ignore[arg-type]
    assert str(info.value) == f"The '{option}' parameter of predict_files {message}"


# --- the logit cache -------------------------------------------------------------------------------------


def test_float32_and_mixed_precision_logits_never_mix_in_the_cache(tmp_path: Path) -> None:
    identity = cache_identity({"sha256": "a" * 64}, transforms_sha256="b" * 64)
    assert "precision" not in identity  # float32 folders keep the name they had before precisions
    assert cache_identity({"sha256": "a" * 64}, transforms_sha256="b" * 64, precision="bfloat16") == {
        **identity,
        "precision": "bfloat16",
    }
    cache = LogitCache(tmp_path, identity, n_classes=3, secret=SECRET)
    assert cache.for_precision("float32") is cache
    assert cache.for_precision("bfloat16").folder != cache.folder
    assert cache.for_precision("bfloat16").for_precision("float32").folder == cache.folder

    model, images, keys = _demo(), _Images(), [f"k{i}" for i in range(N_STUDIES)]
    amp = {"precision": "bfloat16", "precision_tolerance": 0.5}
    first = predict_files(model, _files(), images, n_classes=3, cache=cache, keys=keys, **amp)  # type: ignore[arg-type]
    assert first.precision_check.used == "bfloat16" and first.n_cached == 0
    plain = predict_files(model, _files(), images, n_classes=3, cache=cache, keys=keys)
    assert plain.n_cached == 0  # the bfloat16 logits are not float32's
    assert np.array_equal(plain.logits, predict_files(model, _files(), images, n_classes=3).logits)
    again = predict_files(model, _files(), images, n_classes=3, cache=cache, keys=keys, **amp)  # type: ignore[arg-type]
    assert again.n_cached == N_STUDIES and np.array_equal(again.logits, first.logits)
    # a check that fails on a rerun computes in float32, and so takes float32's cached logits
    strict = predict_files(
        model,
        _files(),
        images,
        n_classes=3,
        cache=cache,
        keys=keys,
        precision="bfloat16",
        precision_tolerance=1e-6,
    )
    assert strict.n_cached == N_STUDIES and np.array_equal(strict.logits, plain.logits)


# --- on a GPU (skipped, and listed as skipped by -ra, where none is visible) -------------------------------


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_auto_pinned_and_float16_agree_with_the_cpu() -> None:
    model, images = _demo(), _Images()
    cpu = predict_files(model, _files(), images, n_classes=3)
    device = f"cuda:{torch.cuda.device_count() - 1}"  # a device other than the first where there is one
    gpu = predict_files(model, _files(), images, n_classes=3, device=device, batch_size="auto", num_workers=1)
    assert gpu.batch_size >= N_STUDIES and not gpu.failures
    np.testing.assert_allclose(gpu.logits, cpu.logits, rtol=0, atol=1e-3)
    half = predict_files(
        model, _files(), images, n_classes=3, device=device, precision="float16", precision_tolerance=0.05
    )
    assert half.precision_check.outcome in ("passed", "exceeded")
    assert half.precision_check.max_change is not None and half.precision_check.n_studies == 32
    model.module.to("cpu")
