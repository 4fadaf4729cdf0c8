"""The run folder: its name, its log and its tables (cohort.csv, exclusions.csv)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from sitecal._io import write_csv_atomic
from sitecal._pseudonym import Pseudonymizer
from sitecal._scrub import ScrubFilter
from sitecal.cohort import Exclusion
from sitecal.errors import OutputError

__all__ = ["attach_log", "detach_log", "new_run_folder", "write_exclusions", "write_tables"]


def write_tables(
    folder: Path,
    class_names: Sequence[str],
    studies: Sequence[Any],
    exclusions: Sequence[Exclusion],
    split_parts: np.ndarray,
    pseudonymize: Pseudonymizer,
) -> None:
    """``cohort.csv`` (one row per analysed study, its part of the split) and ``exclusions.csv``."""
    attributes = list(studies[0].attributes) if studies else []
    write_csv_atomic(
        folder / "cohort.csv",
        ["study_key", "patient_key", "file", "series_key", "series_number", "label", *attributes, "split"],
        (
            [
                s.study_key,
                s.patient_key,
                s.relative_path,
                s.series_key,
                s.series_number,
                class_names[s.label],
                *[s.attributes[a] for a in attributes],
                part,
            ]
            for s, part in zip(studies, split_parts, strict=True)
        ),
    )
    write_exclusions(folder / "exclusions.csv", exclusions, pseudonymize)


def write_exclusions(path: Path, exclusions: Sequence[Exclusion], pseudonymize: Pseudonymizer) -> None:
    """One row per exclusion: stage, reason, pseudonymised file, study key and series key."""
    write_csv_atomic(
        path,
        ["stage", "reason", "file", "key", "series_key"],
        (
            [
                e.stage,
                e.reason,
                pseudonymize.path(e.path) if e.path is not None else "",
                e.key or "",
                e.series_key or "",
            ]
            for e in exclusions
        ),
    )


def new_run_folder(root: Path, name: str, started: datetime) -> Path:
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    root.mkdir(parents=True, exist_ok=True)
    for suffix in ["", *[f"-{i}" for i in range(2, 100)]]:
        folder = root / f"{name}-{stamp}{suffix}"
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        return folder

    raise OutputError(f"{root}: too many run folders named {name}-{stamp}. Wait a second and run again.")


def attach_log(path: Path) -> tuple[logging.Handler, int]:
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(ScrubFilter())
    package = logging.getLogger("sitecal")
    previous = package.level
    package.addHandler(handler)
    if previous == logging.NOTSET or previous > logging.INFO:
        package.setLevel(logging.INFO)
    return handler, previous


def detach_log(attached: tuple[logging.Handler, int]) -> None:
    handler, previous = attached
    package = logging.getLogger("sitecal")
    package.removeHandler(handler)
    package.setLevel(previous)
    handler.close()
