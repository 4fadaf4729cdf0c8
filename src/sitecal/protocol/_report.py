"""Protocol schema: the ``report`` section (where the run goes, what the PDF says, the site's statements)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from sitecal.protocol._base import _Strict
from sitecal.protocol._pacs import DicomwebDestination, DimseDestination, one_peer_kind

__all__ = ["DesignSettings", "GovernanceSettings", "ReportSettings"]


class GovernanceSettings(_Strict):
    """Statements only the site can make; the report is marked DRAFT until all four are given.

    Each field is free text, printed literally in the report's sign-off section. Leave a field out
    (or set it to ``null``) while it is not yet known: the report then shows it as a required placeholder.
    An empty or blank text is refused, so that a placeholder cannot pass for a statement.

    Attributes
    ----------
    ethics_approval : str, optional
        The ethics committee or institutional review board that approved (or waived approval of) this
        validation, with its reference, and how informed consent was handled.
    reference_standard : str, optional
        How the labels were obtained: who assessed the studies (qualifications), with what information,
        blinded to what, how disagreements were resolved.
    interpretation : str, optional
        The site's overall interpretation of the results for the intended use, including any fairness
        concerns.
    human_oversight : str, optional
        How people oversee the model in use: who sees its output, who may override it, how failures are
        reported and monitored.
    """

    ethics_approval: str | None = Field(
        default=None, description="ethics committee / IRB approval or waiver, with reference and consent"
    )
    reference_standard: str | None = Field(
        default=None, description="how the labels were obtained: assessors, information, blinding"
    )
    interpretation: str | None = Field(
        default=None, description="the site's interpretation of the results for the intended use"
    )
    human_oversight: str | None = Field(
        default=None, description="who oversees the model in use, who may override it, how it is monitored"
    )

    @field_validator("ethics_approval", "reference_standard", "interpretation", "human_oversight")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError(
                "must be a non-empty text; leave the field out while it is not yet known (the report is "
                "then a DRAFT)"
            )
        return value


class DesignSettings(_Strict):
    """How the data were collected and acquired: facts the reporting guidelines ask for (CLAIM 5 and 13).

    Optional: the Data section prints each one given, and the guideline crosswalk points at it; one left
    out is listed there as for the site to supply.

    Attributes
    ----------
    collection : {"retrospective", "prospective"}, optional
        Whether the studies were collected before the validation was planned (retrospective) or for it.
    acquisition : str, optional
        The image acquisition protocol in a few lines: e.g. exposure, reconstruction, slice thickness,
        contrast, as the site's protocols set them.
    """

    collection: Literal["retrospective", "prospective"] | None = Field(
        default=None, description="retrospective or prospective data collection"
    )
    acquisition: str | None = Field(
        default=None, description="the image acquisition protocol, in a few lines"
    )

    @field_validator("acquisition")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must be a non-empty text; leave the field out while it is not yet known")
        return value


class ReportSettings(_Strict):
    """Where the run folder goes and what the PDF says.

    Attributes
    ----------
    output_dir : str
        Folder that receives the run folders (relative to the protocol file).
    title : str
        Title of the PDF report.
    sign_off : list of str
        Roles that sign the report, one signature row each.
    page_size : {"A4", "Letter"}
        Paper size of the PDF.
    governance : GovernanceSettings
        The statements only the site can make (ethics approval, reference standard, interpretation, human
        oversight); the report is a DRAFT while any is missing.
    design : DesignSettings
        How the data were collected and acquired (optional facts the Data section prints).
    send_to : DicomwebDestination or DimseDestination, optional
        The archive that receives ``report.dcm`` (STOW-RS or C-STORE) with ``sitecal send RUN_DIR``, or
        after every run that wrote a report when ``after_run: true``.
    """

    output_dir: str = "reports"
    title: str = "Calibration validation report"
    sign_off: list[str] = Field(default_factory=list)
    page_size: Literal["A4", "Letter"] = "A4"
    governance: GovernanceSettings = Field(default_factory=GovernanceSettings)
    design: DesignSettings = Field(default_factory=DesignSettings)
    send_to: DicomwebDestination | DimseDestination | None = Field(
        default=None, description="the archive report.dcm is sent to (DICOMweb STOW-RS or DIMSE C-STORE)"
    )

    @field_validator("send_to", mode="before")
    @classmethod
    def _one_kind(cls, value: Any) -> Any:
        return one_peer_kind(value, (DicomwebDestination, DimseDestination))
