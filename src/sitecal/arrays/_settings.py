"""The evaluation's settings from :func:`~sitecal.arrays.evaluate_arrays`' arguments, checked where declared.

The sections' own models (a protocol's ``calibration``, ``evaluation`` and ``acceptance``) hold each
field's bounds and options, and :func:`sitecal.protocol.check_analysis` the checks that span them: the
arguments are checked by the same declarations a protocol file is, without making a protocol of them. An
error names the argument at fault and the protocol field it stands for, in scikit-learn's form.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sitecal.errors import DataError
from sitecal.evaluation import EvaluationPolicy
from sitecal.protocol import Protocol

__all__ = ["equivalent_protocol", "policy_of"]


#: Where each argument of :func:`evaluate_arrays` sits among a protocol's analysis settings: an error names
#: the argument, and the protocol field it stands for.
_ARGUMENT_OF: dict[tuple[str | int, ...], str] = {
    ("calibration", "per"): "calibrate_by",
    ("calibration", "min_group_size"): "calibration_min_group_size",
    ("calibration", "fallback"): "fallback",
    ("calibration", "split", "seed"): "split_seed",
    ("calibration", "split", "fit_fraction"): "fit_fraction",
    ("calibration", "split", "folds"): "folds",
    ("evaluation", "n_bins"): "n_bins",
    ("evaluation", "min_group_size"): "min_group_size",
    ("evaluation", "bootstrap", "n_resamples"): "n_resamples",
    ("evaluation", "bootstrap", "level"): "level",
    ("evaluation", "bootstrap", "seed"): "seed",
    ("evaluation", "bootstrap", "refit"): "refit",
    ("acceptance",): "acceptance",
    ("name",): "name",
    ("intended_use",): "intended_use",
    ("model",): "class_names",
    ("data", "key"): "key",
    ("subgroups",): "groups",
    ("privacy", "min_count_shown"): "min_count_shown",
}


def policy_of(
    groups: list[str],
    n_classes: int,
    calibration: Mapping[str, Any],
    evaluation: Mapping[str, Any],
    acceptance: Sequence[Mapping[str, Any]],
) -> EvaluationPolicy:
    """The evaluation's settings from the arguments, each checked where it is declared.

    The sections' own models hold each field's bounds and options (a protocol's ``calibration``,
    ``evaluation`` and ``acceptance``); :func:`~sitecal.protocol.check_analysis` the checks that span
    them. An error names the argument at fault and the protocol field it stands for.
    """
    from pydantic import ValidationError

    from sitecal.protocol import (
        AcceptanceCriterion,
        CalibrationSettings,
        EvaluationSettings,
        SubgroupSettings,
        check_analysis,
    )

    per = calibration.get("per")
    if per is not None and per not in groups:
        raise DataError(
            f"calibrate_by={per!r} is not one of groups ({', '.join(groups) or 'none given'}): "
            "give it as a column of groups=, or leave calibrate_by out for one global temperature."
        )
    section: tuple[str | int, ...] = ("calibration",)
    try:
        cal = CalibrationSettings.model_validate(dict(calibration))
        section = ("evaluation",)
        ev = EvaluationSettings.model_validate(dict(evaluation))
        criteria = []
        for i, criterion in enumerate(acceptance):
            section = ("acceptance", i)
            criteria.append(AcceptanceCriterion.model_validate(dict(criterion)))
        check_analysis(groups, cal, ev, criteria, n_classes=n_classes)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise _argument_error((*section, *first["loc"]), str(first["msg"]), first.get("input")) from None
    except ValueError as exc:  # a check spanning the sections, with the location of the field at fault
        raise _argument_error(tuple(getattr(exc, "loc", ())), str(exc), None) from None
    return EvaluationPolicy(
        subgroups={name: SubgroupSettings(column=name) for name in groups},
        reported=tuple(groups),
        calibration=cal,
        evaluation=ev,
        acceptance=tuple(criteria),
    )


def _argument_error(loc: tuple[str | int, ...], message: str, given: Any) -> DataError:
    """``evaluate_arrays``' error for a refused setting: the argument, the protocol field, why."""
    field = ".".join(str(part) for part in loc)
    argument = next(
        (
            name
            for at, name in sorted(_ARGUMENT_OF.items(), key=lambda item: -len(item[0]))
            if loc[: len(at)] == at
        ),
        field,
    )
    message = message.removeprefix("Value error, ")
    got = "" if given is None or isinstance(given, Mapping) or "Got " in message else f" Got {given!r}."
    end = "" if message.endswith((".", "?", "!")) else "."
    return DataError(f"The '{argument}' parameter of evaluate_arrays ({field}): {message}{end}{got}")


def equivalent_protocol(
    policy: EvaluationPolicy,
    class_names: Sequence[str],
    key: str,
    name: str,
    intended_use: str,
    min_count_shown: int,
) -> Protocol:
    """The protocol ``sitecal evaluate`` runs on a predictions file of these rows to give these numbers.

    It is the record of the settings (its hash names them in ``evaluation.json``, and the report prints
    it); the evaluation itself reads the policy.
    """
    from pydantic import ValidationError

    document = {
        "name": name,
        "intended_use": intended_use,
        "model": {"name": "model given as arrays", "class_names": list(class_names)},
        "data": {"predictions": "arrays", "key": key},
        "subgroups": {group: {"column": group} for group in policy.reported},
        "calibration": policy.calibration.model_dump(exclude_unset=True),
        "evaluation": policy.evaluation.model_dump(exclude_unset=True),
        "acceptance": [c.model_dump(exclude_unset=True) for c in policy.acceptance],
        "privacy": {"min_count_shown": min_count_shown},
    }
    try:
        return Protocol.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise _argument_error(tuple(first["loc"]), str(first["msg"]), first.get("input")) from None
