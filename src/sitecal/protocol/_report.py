"""Protocol schema: the ``report`` section (where the run goes, what the PDF says, the site's statements)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator

from sitecal.protocol._base import _Strict
from sitecal.protocol._pacs import LOOPBACK, DicomwebDestination, DimseDestination, one_peer_kind

__all__ = ["DesignSettings", "GovernanceSettings", "MlflowSettings", "ReportSettings"]


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


#: An MLflow experiment or run name, or a tag's value: printable text, no control character.
_MLFLOW_TEXT = r"^[^\x00-\x1f\x7f-\x9f]+$"
#: A tag's key: MLflow's characters for keys, without '/' (no path), starting with a letter or a digit.
_MLFLOW_TAG_KEY = r"^[A-Za-z0-9][A-Za-z0-9_.\- ]*$"
#: Most tags a protocol may set (MLflow takes at most 100 per request; sitecal sets its own besides).
MAX_MLFLOW_TAGS = 20


class MlflowSettings(_Strict):
    """Where a finished run is logged in MLflow (``report.mlflow``); leave the section out for no logging.

    After the run folder is sealed, its parameters (the sha256 of the protocol, the model and the
    inputs; the calibration method, split and bootstrap; the sitecal version and the document id), every
    number of ``metrics.csv`` and the documents a committee reads (``report.pdf``, ``report.html``,
    ``evaluation.json``, ``calibration.json``, ``provenance.json``, ``metrics.csv``, ``seal.json``) are
    logged as one MLflow run, read back from the sealed folder; the run's verdict is the tag
    ``sitecal.verdict``. The per-study tables (``cohort.csv``, ``predictions.csv``, ``exclusions.csv``)
    are never logged; the report and ``evaluation.json`` name only the few misclassified studies they
    list, by pseudonymised key. A failure to log is a warning: the run's verdict and exit code stand.
    Needs the ``mlflow`` package (``pip install 'sitecal[mlflow]'``); ``sitecal check`` says when it is
    missing.

    Attributes
    ----------
    tracking_uri : str
        A local folder (relative to the protocol file; MLflow's file store), or the ``https://`` URL of an
        MLflow tracking server (``http://`` on loopback only; no user, query or fragment in it: give
        credentials in MLflow's environment variables, ``MLFLOW_TRACKING_TOKEN`` or
        ``MLFLOW_TRACKING_USERNAME`` and ``MLFLOW_TRACKING_PASSWORD``).
    experiment : str, optional
        The MLflow experiment, created when it does not exist; default the protocol's ``name``.
    run_name : str, optional
        The MLflow run's name; default the run folder's name (``<protocol name>-<UTC time>``).
    tags : dict of str to str
        Tags set on the MLflow run besides sitecal's own (``sitecal.verdict``, ``sitecal.document_id``,
        ``sitecal.run_folder``); at most 20, keys not starting with ``mlflow.`` or ``sitecal.``.
    """

    tracking_uri: str = Field(
        min_length=1,
        max_length=2048,
        description=(
            "where the run is logged: a local folder (relative to the protocol file) or the https:// URL of "
            "an MLflow tracking server (http:// on loopback only; credentials in MLflow's environment "
            "variables, never in the URL)"
        ),
    )
    experiment: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        pattern=_MLFLOW_TEXT,
        description="the MLflow experiment (created when missing); default the protocol's name",
    )
    run_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        pattern=_MLFLOW_TEXT,
        description="the MLflow run's name; default the run folder's name",
    )
    tags: dict[str, str] = Field(
        default_factory=dict,
        max_length=MAX_MLFLOW_TAGS,
        description=(
            "at most 20 tags set on the MLflow run besides sitecal's own (sitecal.verdict, "
            "sitecal.document_id, sitecal.run_folder); keys not starting with 'mlflow.' or 'sitecal.'"
        ),
    )

    @field_validator("tracking_uri")
    @classmethod
    def _where(cls, value: str) -> str:
        scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]+):", value)
        if scheme is None:  # a path (a Windows drive letter is one letter, not a scheme)
            if re.search(r"[\x00-\x1f\x7f]", value):
                raise ValueError("a folder path holds no control character")
            return value
        kind = scheme.group(1).lower()
        if kind == "file":
            if not re.fullmatch(r"file:(//(localhost)?)?/[^?#\x00-\x1f\x7f]*", value):
                raise ValueError(
                    f"{value!r} is not a file: URI of a local folder (file:///absolute/path); or give the "
                    "folder's path, relative to the protocol file"
                )
            return value
        if kind not in ("http", "https"):
            raise ValueError(
                f"'{kind}:' tracking stores are not supported: give a local folder (a path, relative to the "
                "protocol file) or the https:// URL of an MLflow tracking server"
            )
        match = re.fullmatch(r"(https?)://([^/:?#@\s]+)(:\d{1,5})?(/[^?#@\s]*)?", value, re.IGNORECASE)
        if match is None:
            raise ValueError(
                f"{value!r} is not an http(s) URL of an MLflow tracking server (no user, query or fragment: "
                "give credentials in MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and "
                "MLFLOW_TRACKING_PASSWORD)"
            )
        if match.group(1).lower() == "http" and match.group(2).lower() not in LOOPBACK:
            raise ValueError(
                "plain http sends the report and the credentials in clear: use https; http is accepted "
                "on loopback only"
            )
        return value.rstrip("/")

    @field_validator("tags")
    @classmethod
    def _tags(cls, value: dict[str, str]) -> dict[str, str]:
        for key, text in value.items():
            if not 1 <= len(key) <= 100 or not re.fullmatch(_MLFLOW_TAG_KEY, key):
                raise ValueError(
                    f"tag key {key!r}: 1 to 100 letters, digits, '_', '-', '.' or spaces, starting with a "
                    "letter or a digit"
                )
            if key.lower().startswith(("mlflow.", "sitecal.")):
                raise ValueError(f"tag key {key!r}: keys starting with 'mlflow.' or 'sitecal.' are reserved")
            if not 1 <= len(text) <= 500 or not re.fullmatch(_MLFLOW_TEXT, text):
                raise ValueError(f"tag {key!r}: its value must be 1 to 500 characters, no control character")
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
    mlflow : MlflowSettings, optional
        Log every finished run (parameters, metrics and report documents, no per-study table) to an
        MLflow tracking store; off when left out.
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
    mlflow: MlflowSettings | None = Field(
        default=None,
        description=(
            "log each finished run (parameters, metrics.csv's numbers, the report and result documents; "
            "no per-study table) to an MLflow tracking store; off when left out"
        ),
    )

    @field_validator("send_to", mode="before")
    @classmethod
    def _one_kind(cls, value: Any) -> Any:
        return one_peer_kind(value, (DicomwebDestination, DimseDestination))
