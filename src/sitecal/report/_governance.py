"""The statements only the site can make, and whether the report is still a DRAFT.

The protocol's ``report.governance`` gives four free-text statements (ethics approval, reference standard,
interpretation, human oversight). ``protocol_summary`` passes them to the report as
``protocol["governance"] = {field: text or None}``. While any is missing the report is a DRAFT: the cover
carries a DRAFT mark (placed by the title page through :func:`draft_fields`), every page's running header
says DRAFT, and the sign-off section shows each missing statement as a required placeholder.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["GOVERNANCE_FIELDS", "GovernanceField", "draft_fields", "governance_text", "is_draft"]


@dataclass(frozen=True)
class GovernanceField:
    """One statement the site must supply: its protocol field, printed label and what it should say."""

    name: str
    label: str
    asks: str

    @property
    def protocol_field(self) -> str:
        """The dotted protocol field, ``report.governance.<name>``."""
        return f"report.governance.{self.name}"


GOVERNANCE_FIELDS: tuple[GovernanceField, ...] = (
    GovernanceField(
        "ethics_approval",
        "Ethics approval",
        "the ethics committee or review board that approved or waived this validation, its reference, "
        "and how consent was handled",
    ),
    GovernanceField(
        "reference_standard",
        "Reference standard",
        "how the labels were obtained: who assessed the studies, their qualifications, what they saw, "
        "blinding, and how disagreements were resolved",
    ),
    GovernanceField(
        "interpretation",
        "Interpretation",
        "the site's overall interpretation of these results for the intended use, fairness included",
    ),
    GovernanceField(
        "human_oversight",
        "Human oversight",
        "who sees the model's output, who may override it, and how failures are reported and monitored",
    ),
)


def governance_text(protocol: Mapping[str, Any], name: str) -> str | None:
    """The statement ``name`` as the protocol gives it, or ``None`` when missing or blank."""
    statements = protocol.get("governance")
    value = statements.get(name) if isinstance(statements, Mapping) else None
    if value is None or not str(value).strip():
        return None
    return str(value)


def draft_fields(protocol: Mapping[str, Any]) -> list[str]:
    """Names of the governance statements the protocol does not yet supply, in checklist order.

    Parameters
    ----------
    protocol : Mapping
        The protocol facts the report receives (``protocol_summary``).

    Returns
    -------
    list of str
        Field names under ``report.governance`` (``"ethics_approval"``, ...); empty when the report is
        complete. A non-empty list means the report is a DRAFT.

    Examples
    --------
    >>> draft_fields({"name": "demo", "governance": {"ethics_approval": "REC 26/LO/0001"}})
    ['reference_standard', 'interpretation', 'human_oversight']
    """
    return [f.name for f in GOVERNANCE_FIELDS if governance_text(protocol, f.name) is None]


def is_draft(protocol: Mapping[str, Any]) -> bool:
    """Whether any governance statement is missing (the report is then marked DRAFT)."""
    return bool(draft_fields(protocol))
