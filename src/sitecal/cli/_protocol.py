"""What the subcommands that read a protocol share: loading it, the preflight, and the run's date."""

from __future__ import annotations

import argparse
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

from sitecal.errors import InputError


def load(path: Path, args: argparse.Namespace) -> object:
    """The protocol, reading the model's outputs from ``--predictions`` when it is given."""
    from sitecal.protocol import load_protocol

    loaded = load_protocol(path)
    predictions = getattr(args, "predictions", None)
    if predictions is not None:
        return loaded.with_predictions(predictions)
    if args.command == "evaluate" and loaded.protocol.data.predictions is None:
        raise InputError(
            f"{path}: 'sitecal evaluate' reads the model's outputs from a file: pass --predictions FILE, or "
            "set data.predictions in the protocol. To run the model here, use 'sitecal run'."
        )
    return loaded


def refuse_if_not_ready(path: Path, loaded: object, args: argparse.Namespace, *, verb: str) -> None:
    """Raise :class:`InputError` listing every problem :func:`sitecal.run.preflight.preflight` finds."""
    from sitecal.run.preflight import preflight

    outcome = preflight(
        loaded,  # type: ignore[arg-type]
        device=args.device,
        allow_output_anywhere=args.allow_output_anywhere,
    )
    for note in outcome.notes:
        print(f"sitecal: note: {note}", file=sys.stderr)
    if outcome.problems:
        raise InputError(f"{path}: {verb}:\n" + "\n".join(f"  {p}" for p in outcome.problems))


def source_date() -> datetime | None:
    """The run time from ``SOURCE_DATE_EPOCH`` (reproducible-builds convention), else ``None`` (now).

    With it set, two runs of the same protocol on the same data give the same report, date included.
    """
    value = os.environ.get("SOURCE_DATE_EPOCH")
    if value is None or not value.strip():
        return None
    try:
        return datetime.fromtimestamp(int(value), UTC)
    except (ValueError, OverflowError, OSError):
        raise InputError(
            f"SOURCE_DATE_EPOCH={value!r}: not a number of seconds since 1970-01-01 UTC. Unset it or fix it."
        ) from None
