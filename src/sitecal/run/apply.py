"""Apply a run's calibration to scores made elsewhere: ``sitecal apply calibration.json scores.csv``.

A vendor's model runs outside PyTorch; the site still deploys the temperatures the validation fitted.
:func:`apply_calibration` divides each row's logits by its group's temperature (the global temperature for
a group the fit did not see, or a row without a group value), or under another method
(``calibration.method``, e.g. isotonic) puts them through its group's fit (else the global fit), and
returns the calibrated probabilities;
:func:`apply_calibration_file` does the same for a CSV or Parquet file of scores.

The scores file has the score columns of a predictions file (``logit:<class>`` for every class, or
``prob:<class>``; a two-class model may give one class's probability) and a group column: by default the
subgroup the temperatures were fitted per (``calibration.json`` → ``per``, e.g. ``scanner``), holding the
same values the report shows (whitespace is collapsed). Probabilities are calibrated as their logarithms,
as a run does. The output has one row per usable input row, in input order: the input's line (or row)
number, the group when the fit saw it, the temperature (or the method's name), where it came from, and
``prob:<class>``, and ``calibration_check``: ``sealed`` when the calibration's run folder was verified
against its seal (:mod:`sitecal.run.sealed`), ``unverified`` when it was used with ``--unverified``. No
other column of the input is copied, so that no key or identifier reaches it: join back by the line
number.

The calibration is evidence: ``calibration.json`` must lie in its sealed run folder and the folder must
verify under the site key. Only where the check cannot be made (no key at hand, or the file outside any
run folder, e.g. copied to a vendor's machine) does ``unverified=True`` take it, and every row says so;
an incomplete or edited folder is refused even then. An existing output is replaced only with
``force=True``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from sitecal._io import write_csv_atomic
from sitecal._seal import INCOMPLETE, SEAL, verify_seal
from sitecal.calibration import GroupMethods, GroupTemperatures
from sitecal.cohort.attributes import normalise_text
from sitecal.cohort.predictions_file import read_scores
from sitecal.errors import DataError, SealError
from sitecal.metrics import log_probabilities, softmax
from sitecal.results import read_calibration
from sitecal.run.sealed import run_key

__all__ = ["AppliedFile", "apply_calibration", "apply_calibration_file"]

logger = logging.getLogger(__name__)


def apply_calibration(
    calibration: GroupTemperatures | GroupMethods | Mapping[str, Any],
    scores: ArrayLike,
    groups: Sequence[str] | ArrayLike,
    *,
    kind: str = "logit",
) -> NDArray[np.float64]:
    """Calibrated probabilities, shape (N, C): each row's logits through its group's calibration.

    Parameters
    ----------
    calibration : GroupTemperatures, GroupMethods or mapping
        ``GroupTemperatures`` (softmax of the logits over the group's temperature), ``GroupMethods``
        (another recalibration method, e.g. ``calibration.method: isotonic``), or ``json.load`` of a
        run's ``calibration.json``.
    scores : array_like, shape (N, C)
        Logits (``kind="logit"``) or probabilities (``kind="prob"``, rows summing to 1).
    groups : sequence of str, length N
        Each row's group value; one the fit did not see gets the global temperature.

    Examples
    --------
    >>> from sitecal.calibration import fit_group_temperatures
    >>> temps = fit_group_temperatures(
    ...     np.array([[2.0, 0.0], [2.0, 0.0], [0.0, 2.0], [2.0, 0.0]]), [0, 1, 1, 0], ["A"] * 4,
    ...     min_group_size=1,
    ... )
    >>> apply_calibration(temps, [[2.0, 0.0]], ["A"]).round(3).tolist()  # 3 of 4 right at one margin
    [[0.75, 0.25]]
    """
    fitted = _fitted(calibration)
    values = np.asarray(scores, dtype=np.float64)
    if values.ndim != 2 or values.shape[1] < 2 or not np.isfinite(values).all():
        raise DataError(
            "The 'scores' parameter of apply_calibration must be a finite 2-D array with one column per "
            f"class (at least 2). Got shape {values.shape}."
        )
    if kind not in ("logit", "prob"):
        raise DataError(f"The 'kind' parameter of apply_calibration must be 'logit' or 'prob'. Got {kind!r}.")
    logits = values if kind == "logit" else log_probabilities(values)
    names = np.asarray(groups, dtype=str)
    if names.shape != (values.shape[0],):
        raise DataError(
            f"The 'groups' parameter of apply_calibration must have one entry per row of 'scores' "
            f"({values.shape[0]}). Got {names.shape[0] if names.ndim else 'a scalar'}."
        )
    if not names.shape[0]:
        return np.empty((0, values.shape[1]))
    if isinstance(fitted, GroupMethods):
        probs: NDArray[np.float64] = fitted.probabilities(logits, names)[0]
        return probs
    return softmax(logits, temperature=fitted.temperatures_for(names))


def _fitted(
    calibration: GroupTemperatures | GroupMethods | Mapping[str, Any],
) -> GroupTemperatures | GroupMethods:
    """The calibration itself, from an object or a parsed ``calibration.json`` (either kind)."""
    if isinstance(calibration, GroupTemperatures | GroupMethods):
        return calibration
    if calibration.get("method", "temperature") != "temperature":
        return GroupMethods.from_dict(calibration.get("fits", {}))
    return GroupTemperatures.from_dict(calibration)


@dataclass(frozen=True)
class AppliedFile:
    """What :func:`apply_calibration_file` wrote."""

    output: Path
    n_rows: int
    n_calibrated: int
    n_global: int  # rows whose group the fit did not see (or that had none): the global temperature
    bad_rows: tuple[tuple[int, str], ...]
    verified: bool  # the calibration's run folder verified against its seal (else --unverified)


def apply_calibration_file(
    calibration: Path,
    scores: Path,
    output: Path,
    *,
    group_column: str | None = None,
    force: bool = False,
    key_file: Path | None = None,
    unverified: bool = False,
) -> AppliedFile:
    """Calibrate the scores of a CSV or Parquet file with a run's ``calibration.json``; write ``output``.

    ``group_column``: the column of the group values; default the calibration's ``per`` (none for a
    global calibration). Rows whose scores cannot be used are listed (line and reason) and left out.
    ``force``: replace an existing ``output``. ``key_file``: the site key the run was sealed under, when
    it is not where the run's protocol says. ``unverified``: take a calibration whose seal cannot be
    checked here (see the module docstring).

    Raises
    ------
    SealError
        The calibration's run folder is incomplete or edited, or cannot be verified without
        ``unverified``.
    DataError
        A calibration.json that is not one a run wrote, a scores file without the group column or the
        score columns of the calibration's classes, no usable row, ``output`` equal to ``scores``, or an
        existing ``output`` without ``force``.
    """
    if Path(output).resolve() == Path(scores).resolve():
        raise DataError(f"{output}: the output would replace the scores file. Name another --output.")
    if not force and (Path(output).exists() or Path(output).is_symlink()):
        raise DataError(f"{output}: exists. Name another --output, or pass --force to replace it.")
    verified = _verify(Path(calibration), key_file=key_file, unverified=unverified)
    document = read_calibration(calibration)
    try:
        fitted = _fitted(document.to_dict())
    except DataError as exc:  # the fits inside a well-formed document
        raise DataError(f"{calibration}: {exc} Restore the calibration.json the run wrote.") from None
    column = group_column if group_column is not None else document.per
    rows = read_scores(scores, class_names=document.class_names, group_column=column)
    names = [normalise_text(g) for g in rows.groups]
    probs = apply_calibration(fitted, rows.logits, names)
    known = [name in fitted.groups for name in names]
    how, origin, used = _how_calibrated(fitted, names)
    check = "sealed" if verified else "unverified"
    write_csv_atomic(
        output,
        [
            rows.numbered_by,
            "group",
            how,
            origin,
            *[f"prob:{c}" for c in document.class_names],
            "calibration_check",
        ],
        (
            [
                str(position),
                name if seen else "",
                value,
                "group" if seen else ("global: no group value" if column and not raw else "global"),
                *[repr(float(v)) for v in row],
                check,
            ]
            for position, name, raw, seen, value, row in zip(
                rows.positions, names, rows.groups, known, used, probs, strict=True
            )
        ),
    )
    if rows.bad_rows:
        _warn_bad_rows(scores, rows.bad_rows, n_rows=rows.n_rows, numbered_by=rows.numbered_by)
    return AppliedFile(
        output=Path(output),
        n_rows=rows.n_rows,
        n_calibrated=len(rows.positions),
        n_global=sum(not k for k in known),
        bad_rows=rows.bad_rows,
        verified=verified,
    )


def _how_calibrated(
    fitted: GroupTemperatures | GroupMethods, names: Sequence[str]
) -> tuple[str, str, list[str]]:
    """The output's columns of how each row was calibrated: their names, and each row's value.

    Temperature scaling gives the temperature each row got (``temperature``, ``temperature_from``);
    another method gives its name (``method``, ``fit_from``: whether the row's group had its own fit).
    """
    if isinstance(fitted, GroupTemperatures):
        used = [repr(float(t)) for t in fitted.temperatures_for(np.asarray(names, dtype=str))]
        return "temperature", "temperature_from", used
    return "method", "fit_from", [fitted.name] * len(names)


def _warn_bad_rows(
    scores: Path, bad_rows: Sequence[tuple[int, str]], *, n_rows: int, numbered_by: str
) -> None:
    """Warn that rows whose scores cannot be used are left out, naming the first."""
    logger.warning(
        "%s: %d of %d rows have scores that cannot be used and are not in the output (e.g. %s %d: %s)",
        scores,
        len(bad_rows),
        n_rows,
        numbered_by,
        bad_rows[0][0],
        bad_rows[0][1],
    )


def _verify(calibration: Path, *, key_file: Path | None, unverified: bool) -> bool:
    """Whether ``calibration`` was verified in its sealed run folder; refuse what cannot be taken.

    Taken unverified (with ``unverified``) only where no check can be made: no seal beside the file and no
    sign of an unfinished run, or a seal whose key is not at hand. A folder that can be checked and fails
    is refused whatever the flags.
    """
    folder = calibration.resolve().parent
    if not (folder / SEAL).is_file() and not (folder / INCOMPLETE).exists():
        if unverified:
            logger.warning("%s: used unverified: no sealed run folder around it (--unverified)", calibration)
            return False
        raise SealError(
            f"{calibration}: not in a sealed run folder (no {SEAL} beside it), so what it holds cannot be "
            "verified. Give the calibration.json inside the run folder the run wrote, or pass --unverified "
            "to use it as it is (the output then says it was not verified)."
        )
    try:
        key = run_key(folder, key_file=key_file)
    except SealError:
        if not unverified or (folder / INCOMPLETE).exists():
            raise
        logger.warning("%s: used unverified: its run folder's key is not at hand (--unverified)", calibration)
        return False
    seal = verify_seal(folder, key)
    if calibration.name != "calibration.json" or "calibration.json" not in seal.files:
        raise SealError(f"{calibration}: not the calibration.json of the sealed run folder {folder}.")
    return True
