"""``inputs.batch_size: auto``: the largest batch that fits a CUDA device, found by doubling on real inputs.

On a CUDA device the batch doubles from 1 (1, 2, 4, ... up to :data:`AUTO_BATCH_CAP`) while a forward pass
over that many real, transformed inputs, already on the device, runs without
:class:`torch.cuda.OutOfMemoryError`; the last size that ran is used (at least 1), and the cache is emptied
after each failure and after the probe. On any other device ``auto`` is :data:`DEFAULT_BATCH_SIZE`: a CPU's
memory is not the limit there, and the fixed size keeps a CPU run's logits exactly what they were.

The size does not change what a study's logits mean: the model runs in eval mode (batch norm uses its
running statistics, dropout is off), so a study's logits do not depend on the studies beside it. They are
not bit-identical across batch sizes, though: convolution and matrix kernels (oneDNN on CPU, cuDNN and
cuBLAS on GPU) block the batch dimension and may sum in another order, so the last float32 bits move
(measured on the demo model on CPU: at most 6e-6 between batches of 1, 7 and 16 for logits up to about 15).
The size used is recorded in :attr:`sitecal.inference.InferenceResult.batch_size`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch

__all__ = ["AUTO_BATCH_CAP", "DEFAULT_BATCH_SIZE", "largest_batch"]

logger = logging.getLogger(__name__)

#: The batch size of ``inputs.batch_size`` when left out, and of ``auto`` on a device other than CUDA.
DEFAULT_BATCH_SIZE = 32
#: The largest batch ``auto`` tries: beyond it a GPU is rarely faster per study, and a batch is held whole.
AUTO_BATCH_CAP = 256


def largest_batch(run: Callable[[int], object], *, cap: int = AUTO_BATCH_CAP, fallback: int) -> int:
    """The largest power of two up to ``cap`` for which ``run(size)`` does not run out of device memory.

    Parameters
    ----------
    run : callable
        Runs the model once on a batch of ``size`` real inputs; raises :class:`torch.cuda.OutOfMemoryError`
        when they do not fit.
    cap : int, default :data:`AUTO_BATCH_CAP`
        The largest size tried.
    fallback : int
        Returned when ``run(1)`` raises anything but running out of memory (a model that fails on these
        inputs: the run itself isolates and reports that failure).

    Returns
    -------
    int
        At least 1: a device on which one study does not fit gets 1, and the run reports each study's
        failure.

    Examples
    --------
    >>> def run(size):
    ...     if size > 24:
    ...         raise torch.cuda.OutOfMemoryError("CUDA out of memory")
    >>> largest_batch(run, fallback=32)
    16
    """
    best, size = 0, 1
    while size <= cap:
        out_of_memory = failed = False
        try:
            run(size)
        except torch.cuda.OutOfMemoryError:
            out_of_memory = True  # freed below, outside the handler, once the traceback's frames are gone
        except Exception:  # the model's own failure; the run proper isolates it study by study
            failed = True
        if out_of_memory:
            _empty_cache()
        if out_of_memory or failed:
            if failed and not best:
                return fallback
            break
        best, size = size, 2 * size
    _empty_cache()
    return max(best, 1)


def _empty_cache() -> None:
    torch.cuda.empty_cache()  # nothing when CUDA was never initialised
