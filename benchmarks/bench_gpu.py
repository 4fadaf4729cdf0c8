"""Inference on a device: sitecal's predict_files against the bare model on preloaded tensors, per precision.

Files: N generated 512x512 int16 CT files with a clinical-size header (``_ct_files.py``), through the chain a
CT protocol would give: ``LoadImage(DicomImageReader)``, EnsureChannelFirst (no_channel), Resize to 224x224,
NormalizeIntensity. Model: ``monai.networks.nets.DenseNet121(spatial_dims=2, in_channels=1,
out_channels=2)``, random weights (seeded), as in ``bench_inference.py``.

For each precision (``--precisions``; default float32 and float16 on CUDA, float32 and bfloat16 on CPU):

- bare model (baseline): the images loaded and transformed by the same chain beforehand (untimed), stacked
  and moved to the device (untimed); timed: ``module(batch)`` under ``torch.autocast`` (nothing for
  float32) and the logits back to numpy, batch after batch, under ``torch.inference_mode()``.
- sitecal: ``predict_files(model, files, transforms, device=..., batch_size=..., precision=...)``: reading
  and transforming in ``--workers`` DataLoader workers, pinned memory and asynchronous copies on CUDA, the
  precision check (the first 32 studies in float32 and in the precision) and, with ``--batch-size auto``,
  the batch probe, all inside the timed call. ``precision_tolerance`` is set to 0.99 here so that the
  precision asked for is the one timed whatever its check measures; the measured change is printed.

The bare model runs in the batch size sitecal used (``auto`` resolved). Each route runs once untimed
(warm-up: cuDNN/oneDNN kernel choice, worker start-up), then best of ``--repeats`` passes, interleaved. In
float32 the two routes' logits are compared (max |difference| printed; they differ only by batch
composition, see ``sitecal.inference._batch_size``). Target (issue): sitecal >= 0.8x the bare model.

Run:  python benchmarks/bench_gpu.py --device cuda            (N = 1024, batch auto)
      python benchmarks/bench_gpu.py --device cpu --quick     (N = 32, batch 16, 1 pass: a smoke run)

With few files the precision check (32 studies run twice, their files read once more) is a large share of
sitecal's time ("of which settling"); over a network's cohort it is a fixed cost of seconds.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from monai.transforms import Compose

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _ct_files import write_ct_files
from bench_inference import CLASSES, SPECS, _densenet  # the same chain and model as on the CPU

from sitecal.inference import InferenceResult, build_transforms, predict_files, settle_inference
from sitecal.inference._precision import Precision, autocast
from sitecal.inference.models import LoadedModel

#: So that the precision asked for is the one timed (the check's figure is printed, not acted on).
TOLERANCE = 0.99


def _bare(
    module: torch.nn.Module, batches: list[torch.Tensor], precision: Precision, device: torch.device
) -> np.ndarray:
    with torch.inference_mode(), autocast(precision, device):
        return np.concatenate([module(batch).float().cpu().numpy() for batch in batches])


def _timed(run: Callable[[], np.ndarray]) -> tuple[float, np.ndarray]:
    start = time.perf_counter()
    out = run()
    return time.perf_counter() - start, out


def _one(
    model: LoadedModel,
    transforms: Compose,
    paths: list[Path],
    images: torch.Tensor,
    *,
    device: torch.device,
    batch_size: int | str,
    precision: Precision,
    repeats: int,
    workers: int,
) -> tuple[int, float, float, float, float | None, float]:
    """Batch used, best bare and sitecal seconds, settling seconds, the check's change, the logit gap."""

    def sitecal(files: list[Path]) -> InferenceResult:
        result = predict_files(
            model,
            files,
            transforms,
            n_classes=CLASSES,
            batch_size=batch_size,  # type: ignore[arg-type]
            num_workers=workers,
            device=device,
            precision=precision,
            precision_tolerance=TOLERANCE,
        )
        assert not result.failures, result.failures[:3]
        assert result.precision_check.used == precision, result.precision_check
        return result

    size = sitecal(paths[:64]).batch_size  # warm-up, and the batch size auto resolves to
    batches = list(torch.split(images, size))
    _bare(model.module, batches[:2], precision, device)
    best = {"bare": float("inf"), "sitecal": float("inf")}
    for _ in range(repeats):  # interleaved, so that load from other work falls on both alike
        seconds, bare = _timed(lambda: _bare(model.module, batches, precision, device))
        best["bare"] = min(best["bare"], seconds)
        seconds, result = _timed(lambda: sitecal(paths))
        best["sitecal"] = min(best["sitecal"], seconds)
    gap = float(np.abs(result.logits - bare).max())
    # what settling costs (the precision check, the batch probe), inside sitecal's time
    settle_s, _ = _timed(
        lambda: settle_inference(
            model,
            paths,
            transforms,
            n_classes=CLASSES,
            batch_size=batch_size,  # type: ignore[arg-type]
            precision=precision,
            tolerance=TOLERANCE,
            device=device,
        )
    )
    return size, best["bare"], best["sitecal"], settle_s, result.precision_check.max_change, gap


def bench(
    device: torch.device,
    n: int,
    batch_size: int | str,
    precisions: list[Precision],
    repeats: int,
    workers: int,
) -> None:
    model = _densenet()
    model.module.to(device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transforms = build_transforms(SPECS, voi="none")
    with tempfile.TemporaryDirectory() as tmp:
        print(f"writing {n} files ...", flush=True)
        paths = write_ct_files(Path(tmp), n, header_elements=250)
        for path in paths:  # warm the page cache for every route alike
            path.read_bytes()
        images = torch.stack([torch.as_tensor(transforms(str(p))) for p in paths]).to(device)
        rows = [
            (
                p,
                *_one(
                    model,
                    transforms,
                    paths,
                    images,
                    device=device,
                    batch_size=batch_size,
                    precision=p,
                    repeats=repeats,
                    workers=workers,
                ),
            )
            for p in precisions
        ]

    print()
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {os.cpu_count()} cores"
    print(
        f"Inference on {device} ({name}), torch {torch.__version__}, {n} files of 512x512 int16 CT -> "
        f"224x224, DenseNet121 (2D, 1 -> {CLASSES}), batch {batch_size}, num_workers {workers}, "
        f"best of {repeats} pass(es)"
    )
    print()
    print(
        "| precision | batch | bare model | sitecal predict_files | of which settling | sitecal vs bare | "
        "probability change (check) | max logit gap |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for precision, size, bare_s, site_s, settle_s, change, gap in rows:
        shown = "-" if change is None else f"{change:.2g}"
        print(
            f"| {precision} | {size} | {n / bare_s:.1f} studies/s ({bare_s:.2f} s) | {n / site_s:.1f} "
            f"studies/s ({site_s:.2f} s) | {settle_s:.2f} s | {bare_s / site_s:.2f}x | {shown} | {gap:.2g} |"
        )
    print()
    for precision, _, bare_s, site_s, *_ in rows:
        ratio = bare_s / site_s
        print(
            f"{precision}: sitecal {ratio:.3f}x the bare model on {device} (target >= 0.8x): "
            f"{'met' if ratio >= 0.8 else 'MISSED'}"
        )
    for precision, _, bare_s, site_s, *_ in rows[1:]:
        print(
            f"{precision} against {rows[0][0]}: bare model {rows[0][2] / bare_s:.2f}x as fast, sitecal "
            f"{rows[0][3] / site_s:.2f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (default cuda)")
    parser.add_argument("--files", type=int, help="files (default 1024 on CUDA, 96 on CPU)")
    parser.add_argument("--batch-size", default=None, help="an int or auto (default auto on CUDA, 16 on CPU)")
    parser.add_argument(
        "--precisions", help="comma-separated (default float32,float16 on CUDA, float32,bfloat16 on CPU)"
    )
    parser.add_argument("--repeats", type=int, default=2, help="best of this many passes (default 2)")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers (default 2)")
    parser.add_argument("--quick", action="store_true", help="N = 256 on CUDA, 32 on CPU; 1 pass")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: no CUDA GPU is visible to this PyTorch")
    cuda = device.type == "cuda"
    n = args.files or ((256 if cuda else 32) if args.quick else (1024 if cuda else 96))
    batch = args.batch_size or ("auto" if cuda else "16")
    batch_size: int | str = batch if batch == "auto" else int(batch)
    precisions = (args.precisions or ("float32,float16" if cuda else "float32,bfloat16")).split(",")
    bench(device, n, batch_size, precisions, 1 if args.quick else args.repeats, args.workers)  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
