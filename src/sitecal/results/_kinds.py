"""Value kinds shared by the documents: counts, shares, temperatures, names and the closed vocabularies."""

from __future__ import annotations

from typing import Annotated, Literal, TypeAlias

from sitecal.results._fields import Constraint

__all__ = [
    "Count",
    "ExclusionStage",
    "ExclusionUnit",
    "IntervalMethod",
    "Name",
    "Positive",
    "Sha256",
    "Share",
    "Stage",
    "Statistic",
    "SubgroupName",
    "TemperatureSource",
    "Verdict",
]

#: A number of studies, patients, files or bins: an integer >= 0.
Count: TypeAlias = Annotated[int, Constraint(minimum=0)]
#: A share or probability in [0, 1].
Share: TypeAlias = Annotated[float, Constraint(minimum=0, maximum=1)]
#: A temperature: a number > 0.
Positive: TypeAlias = Annotated[float, Constraint(exclusive_minimum=0)]
#: Hex SHA-256 of a file's bytes.
Sha256: TypeAlias = Annotated[str, Constraint(pattern=r"^[0-9a-f]{64}$")]
#: A protocol or criterion name.
Name: TypeAlias = Annotated[str, Constraint(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
#: A subgroup attribute as the protocol names it.
SubgroupName: TypeAlias = Annotated[str, Constraint(pattern=r"^[a-z][a-z0-9_]*$")]

#: A verdict of a criterion, of a group or of the run.
Verdict: TypeAlias = Literal["pass", "fail", "insufficient data"]
#: Before calibration (the model's own probabilities) or after (with the group's temperature).
Stage: TypeAlias = Literal["before", "after"]
#: Which part of an interval a criterion compares.
Statistic: TypeAlias = Literal["estimate", "low", "high"]
#: How a bootstrap interval is read from the replicates.
IntervalMethod: TypeAlias = Literal["percentile", "bca"]
#: Where a group's temperature came from: its own fit, the global one (too few fit studies), shrunk
#: toward the global one, or the single global temperature.
TemperatureSource: TypeAlias = Literal["own", "global_fallback", "shrunk", "global"]
#: The pipeline stage that dropped something.
ExclusionStage: TypeAlias = Literal["scan", "studies", "series", "labels", "predictions", "inference"]
#: What was left out; only ``study`` removes a study from the flow.
ExclusionUnit: TypeAlias = Literal["file", "image", "series", "study", "label", "prediction"]
