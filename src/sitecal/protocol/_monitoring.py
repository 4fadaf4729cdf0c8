"""The ``monitoring`` section: how ``sitecal monitor`` watches a deployed model's calibration over time."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from sitecal.protocol._base import _Strict

__all__ = ["MonitoringSettings"]


class MonitoringSettings(_Strict):
    """After go-live: scores over time, judged against a sealed validation run (``sitecal monitor``).

    Attributes
    ----------
    baseline : str
        The sealed run folder of the validation whose deployed calibration is monitored (relative to the
        protocol file). Its temperatures are applied to every score, its acceptance criteria give the
        margins, and its evaluation studies are the reference of the label-free checks.
    window : {"week", "month", "quarter"}
        The length of a monitoring window (ISO weeks, calendar months or quarters, by the study date).
    date_column : str, optional
        The column of ``data.predictions`` holding each study's date (``YYYY-MM-DD``, or ``YYYYMMDD`` as
        DICOM writes StudyDate). Left out for DICOM studies (``data.dicom_dir`` or ``data.source``, the
        validated model run here), which are dated by their StudyDate.
    alpha : float
        The family-wise false-alarm probability over the whole monitoring horizon, shared by every group,
        margin and direction the monitor tests.
    horizon : int
        Windows a change may start in (the monitor weighs a drift starting in each of them alike); the
        alarms stay valid after it, but react more slowly to a change that starts later.
    output_dir : str
        The monitoring folder (relative to the protocol file): its history database and one sealed folder
        per ``sitecal monitor`` run.
    database : str, optional
        A ``postgresql://user@host:port/database`` URL for a history shared by a network; by default the
        history is ``history.sqlite`` in the monitoring folder.
    password_file : str, optional
        A file holding the PostgreSQL password (never written in the URL).
    """

    baseline: str = Field(description="the sealed validation run folder whose calibration is monitored")
    window: Literal["week", "month", "quarter"] = "month"
    date_column: str | None = Field(
        default=None,
        description="the column of data.predictions holding each study's date (DICOM studies: StudyDate)",
    )
    alpha: float = Field(default=0.05, gt=0, le=0.2)
    horizon: int = Field(default=24, ge=1, le=520)
    output_dir: str = "monitoring"
    database: str | None = Field(
        default=None, description="a postgresql:// URL; by default history.sqlite in the monitoring folder"
    )
    password_file: str | None = None

    @field_validator("database")
    @classmethod
    def _postgres_url(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if not value.startswith(("postgresql://", "postgres://")):
            raise ValueError(
                "must be a postgresql://user@host:port/database URL; leave it out for history.sqlite in "
                "the monitoring folder"
            )
        if (
            "@" in value.split("//", 1)[1].split("/", 1)[0]
            and ":" in value.split("//", 1)[1].split("@", 1)[0]
        ):
            raise ValueError("holds a password: give it in password_file, never in the protocol")
        return value

    @field_validator("baseline", "output_dir", "date_column", "password_file")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must be a non-empty text")
        return value
