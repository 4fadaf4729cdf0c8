"""The scores over time as ``sitecal monitor`` reads them, before the deployed calibration."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

__all__ = ["DatedRows"]


@dataclass(frozen=True)
class DatedRows:
    """Monitored studies, one row each: pseudonymised keys, the model's logits, labels and dates.

    From a predictions file's rows or from DICOM studies the model was run on; the monitor then applies
    the deployed temperatures and cuts the dates into windows.
    """

    keys: NDArray[np.str_]
    patients: NDArray[np.str_]
    logits: NDArray[np.float64]  # before the deployed temperature
    labels: NDArray[np.int64]  # -1 (UNLABELLED): not yet labelled
    days: NDArray[np.int64]  # the study's date, days since 1970-01-01
    attributes: Mapping[str, NDArray[np.str_]]  # subgroup -> each row's group, as a run shows it
    excluded: Mapping[str, int]  # reason -> studies (or rows) left out
