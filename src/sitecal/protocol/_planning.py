"""Protocol schema: the study-size planning of ``evaluation.planning``."""

from __future__ import annotations

from pydantic import Field, field_validator

from sitecal.protocol._base import _at_most, _Strict

__all__ = ["DEFAULT_PLAN_SIZES", "MAX_PLAN_SIMULATIONS", "PlanningSettings"]


#: Group sizes the study-size planning simulates by default.
DEFAULT_PLAN_SIZES: tuple[int, ...] = (50, 100, 200, 300, 400, 600, 800, 1200, 1600)
#: Most simulated groups per size: each is a bootstrap of one simulated group.
MAX_PLAN_SIMULATIONS = 5000


class PlanningSettings(_Strict):
    """The study-size column of the acceptance tables: studies a group needs for an 80 % chance to pass.

    After the run, for every judged group of every criterion, groups of each size in ``sizes`` are drawn
    from the group's own calibrated probabilities (each label drawn from its study's probabilities, so the
    model is calibrated by assumption) and judged as the run judges; the smallest size that passes in at
    least 80 % of ``simulations`` groups is reported. ``simulations: 0`` leaves the column out.

    Attributes
    ----------
    simulations : int
        Simulated groups per size (0, or 20 to 5000). 100 give the pass rate to about ±4 percentage points.
    resamples : int
        Bootstrap resamples of each simulated group's interval (50 to 10000; fewer than a run's, which
        moves an interval's ends by little).
    sizes : list of int
        The group sizes simulated (10 to 100000 studies each); the reported size is one of them.
    """

    simulations: int = Field(
        default=100, ge=0, description="simulated groups per size; 0: no study-size column"
    )
    resamples: int = Field(
        default=200, ge=50, le=10_000, description="bootstrap resamples per simulated group"
    )
    sizes: list[int] = Field(default_factory=lambda: list(DEFAULT_PLAN_SIZES), min_length=1, max_length=30)

    @field_validator("simulations")
    @classmethod
    def _simulations_range(cls, value: int) -> int:
        if 0 < value < 20:
            raise ValueError(
                f"give 0 (no study-size column) or at least 20 simulated groups per size (100 give the pass "
                f"rate to about ±4 percentage points). Got {value}"
            )
        return _at_most(
            value, MAX_PLAN_SIMULATIONS, "each is a bootstrap of a simulated group; 100 to 1000 is usual"
        )

    @field_validator("sizes")
    @classmethod
    def _sizes_range(cls, value: list[int]) -> list[int]:
        wrong = [n for n in value if not 10 <= n <= 100_000]
        if wrong:
            raise ValueError(f"each size must lie between 10 and 100000 studies. Got {wrong}")
        return sorted(set(value))
