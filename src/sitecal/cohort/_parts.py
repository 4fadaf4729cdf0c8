"""Predictions parts: what a site of a network ships so that one evaluation covers every site.

Each site of a regional network runs ``sitecal predict`` behind its own firewall with a protocol naming the
network's shared key (``privacy.network_key_file``). Its output is then a *part*: a CSV and a sidecar
``<name>.part.json``. ``sitecal evaluate --predictions FOLDER`` over a folder of parts from every site gives
one evaluation with per-site results, equal to a central run over all the studies.

What leaves a site (nothing else):

- per analysed study (CSV): ``study_key`` and ``patient_key``, HMAC-SHA256 pseudonyms under the network key
  (no UID, no PatientID, no path); ``label`` (the class name); the model's float32 logits
  (``logit:<class>``, written exactly); the study's subgroup values (``subgroup:<name>``, one column per
  subgroup read from a tag or a column, after the protocol's mapping or bands); a value held by fewer than
  ``privacy.min_count_shown`` of the site's studies leaves it only as a keyed token (:func:`rare_token`),
  never in clear; intersections are formed centrally;
- per site (sidecar, :mod:`sitecal.cohort._part_sidecar`): the counts of the flow (files, DICOM instances,
  studies, labelled, series) and of the exclusions by reason *code* and unit (a closed vocabulary,
  :mod:`sitecal.cohort._exclusion_codes`: no text of the site's reasons leaves it), the model's sha256,
  the class names, the subgroups, the network key's fingerprint (which names the key without revealing it)
  and the CSV's sha256, sealed by a MAC under the network key.

Centrally, every sidecar's seal is verified before any part is used, and each part's bytes against the
sha256 its sidecar sealed: an edited part or sidecar is refused, naming it, even with its plain sha256
recomputed (only a holder of the network key can seal). An exclusion code is shown as sitecal's own
sentence for it; an unknown code is refused.

The fit/evaluation split and the resampling follow keys drawn from the network pseudonyms
(:func:`sitecal._split_key.network_split_keys`), not from the identifiers, which stay at the sites: every
site and the central evaluation order a patient the same way, so the parts give the central run's split.
Centrally, a token is matched to the value other sites shipped in clear, or to one of the protocol's band
labels; then rare values are pooled over the whole network as a central run pools them. So the parts give
the central run's evaluation exactly, except in one stated case: a value rare at every site that holds it
(shipped nowhere in clear) and not a band label, which is pooled as ``other (n < k)`` however many studies
hold it across the network (the report then shows a smaller group for it than a central scan would).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from sitecal._io import write_csv_atomic
from sitecal._pseudonym import Pseudonymizer
from sitecal._split_key import network_split_keys
from sitecal.cohort._build import _shown
from sitecal.cohort._part_rows import altered, part_sha256, read_rows
from sitecal.cohort._part_sidecar import (
    PART_FORMAT,
    SIDECAR_SUFFIX,
    PartFlow,
    Sidecar,
    read_sidecar,
)
from sitecal.cohort._records import Cohort, Exclusion, PredictionsFileSummary, Study
from sitecal.cohort.attributes import UNKNOWN, age_band_labels, other_value
from sitecal.cohort.mapping import UNMAPPED
from sitecal.errors import DataError
from sitecal.protocol import Protocol, SubgroupSettings

__all__ = [
    "MAX_PARTS",
    "MAX_PART_BYTES",
    "PART_FORMAT",
    "SidecarFacts",
    "network_order",
    "part_facts",
    "part_files",
    "parts_record",
    "rare_token",
    "read_parts",
    "shipped_subgroups",
    "write_part",
]

#: Larger parts are refused before they are read (a row is a few hundred bytes: about 4 million rows).
MAX_PART_BYTES = 1 << 30
#: Parts one evaluation reads at most: one per site (or a few, for a site that splits its cohort), far
#: above any network's sites; a folder of more is refused before any is read.
MAX_PARTS = 1000
#: Exclusions the sidecars of one evaluation may count together (each is a record of the central flow,
#: kept as one shared record per reason: 8 bytes each, 80 MB at this bound).
_MAX_EXCLUSIONS = 10**7
_AGAIN = "Ask the site for both files of its part again."


@dataclass(frozen=True)
class SidecarFacts:
    """What a part says of itself besides its rows (the sidecar), checked against the protocol."""

    model_sha256: str | None
    key_fingerprint: str
    class_names: tuple[str, ...]
    subgroups: tuple[str, ...]


def part_facts(protocol: Protocol, key_fingerprint: str, *, model_sha256: str | None) -> SidecarFacts:
    """What every part of this protocol's network must say of itself (``model_sha256=None``: any model)."""
    return SidecarFacts(
        model_sha256=model_sha256,
        key_fingerprint=key_fingerprint,
        class_names=tuple(protocol.model.class_names),
        subgroups=tuple(shipped_subgroups(protocol.subgroups)),
    )


def shipped_subgroups(subgroups: Mapping[str, SubgroupSettings]) -> list[str]:
    """The subgroups a part carries: every one but intersections (formed again centrally)."""
    return [name for name, s in subgroups.items() if s.intersection is None]


def network_order(cohort: Cohort) -> Cohort:
    """The cohort with split keys drawn from its network pseudonyms (the same at every site)."""
    studies = []
    for study in cohort.studies:
        split, order = network_split_keys(study.study_key, study.patient_key)
        studies.append(replace(study, split_key=split, study_order=order))
    return replace(cohort, studies=tuple(studies))


def write_part(
    path: Path,
    cohort: Cohort,
    studies: Sequence[Study],
    logits: np.ndarray,
    exclusions: Sequence[Exclusion],
    *,
    facts: SidecarFacts,
    pseudonymize: Pseudonymizer,
    min_count_shown: int,
) -> Path:
    """Write the part (CSV at ``path``) and its sidecar, sealed under the network key; return the sidecar.

    ``studies`` hold their subgroup values unpooled; a value held by fewer than ``min_count_shown`` of them
    leaves the site as its keyed token (:func:`rare_token`), never in clear. ``pseudonymize`` holds the
    network key, which seals the sidecar (:func:`sitecal.cohort._part_sidecar.part_mac`). Exclusions leave
    as counts by reason code (:mod:`sitecal.cohort._exclusion_codes`), never as their reasons' text.
    """
    names = list(facts.subgroups)
    shown = _tokenised([s.attributes for s in studies], names, min_count_shown, pseudonymize)
    studies = [replace(s, attributes=a) for s, a in zip(studies, shown, strict=True)]
    header = ["study_key", "patient_key", "label"]
    header += [f"logit:{c}" for c in facts.class_names] + [f"subgroup:{n}" for n in names]
    write_csv_atomic(
        path,
        header,
        (
            [s.study_key, s.patient_key, facts.class_names[s.label]]
            + [repr(float(v)) for v in row]
            + [s.attributes[n] for n in names]
            for s, row in zip(studies, np.asarray(logits, dtype=np.float64), strict=True)
        ),
    )
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    sidecar = path.with_name(path.name + SIDECAR_SUFFIX)
    Sidecar(
        csv=path.name,
        csv_sha256=digest.hexdigest(),
        rows=len(studies),
        model_sha256=facts.model_sha256,
        network_key_fingerprint=facts.key_fingerprint,
        class_names=tuple(facts.class_names),
        subgroups=tuple(names),
        flow=PartFlow(
            files_found=cohort.files_found,
            dicom_instances=cohort.dicom_instances,
            studies=cohort.n_studies_found,
            labelled=cohort.n_labelled,
            series_found=cohort.n_series_found,
            series_selected=cohort.n_series_selected,
        ),
        exclusions=Sidecar.counted(exclusions),
    ).write(sidecar, pseudonymize.key)
    return sidecar


def part_files(folder: Path) -> list[Path]:
    """The parts in ``folder``: the CSV beside each sidecar (``<name>.csv.part.json``), by name."""
    return sorted(
        path.with_name(path.name.removesuffix(SIDECAR_SUFFIX)) for path in folder.glob("*" + SIDECAR_SUFFIX)
    )


def parts_record(folder: Path, *, pseudonymize: Pseudonymizer | None = None) -> dict[str, Any]:
    """What provenance records of a network's parts: how many, their rows, the model, each part's sha256.

    Each part's sha256 must be the one its sidecar recorded. With ``pseudonymize`` (the network key), every
    sidecar's seal is verified too, as :func:`read_parts` requires; without it, the sidecars are read within
    the same bounds and their fields checked for form (a model sha256, a key fingerprint), so that nothing
    else reaches provenance.
    """
    parts = _listed(folder)
    sidecars = [_sidecar(part, pseudonymize) for part in parts]
    sha256 = {part.name: part_sha256(part) for part in parts}
    for part, sidecar in zip(parts, sidecars, strict=True):
        if sha256[part.name] != sidecar.csv_sha256:
            raise altered(part)
    return {
        "parts": len(sidecars),
        "rows": sum(s.rows for s in sidecars),
        "model_sha256": sidecars[0].model_sha256 if sidecars else None,
        "network_key_fingerprint": sidecars[0].network_key_fingerprint if sidecars else None,
        "sha256": sha256,
    }


def read_parts(
    folder: Path,
    *,
    facts: SidecarFacts,
    subgroups: Mapping[str, SubgroupSettings],
    min_count_shown: int,
    pseudonymize: Pseudonymizer,
) -> Cohort:
    """Every part in ``folder`` (``*.csv`` with their sidecars) → one cohort, as a central scan would give.

    Every sidecar's seal is verified under the network key (``pseudonymize.key``) before anything of any
    part is used, and each part's bytes are hashed as they are read against the sha256 its sidecar sealed:
    the cohort is returned only once every part is verified whole.

    Raises :class:`~sitecal.errors.DataError` naming the part and the fix for a part without its sidecar,
    of another network key, model, class list or subgroups, altered after it was written (the part or its
    sidecar, even with a recomputed sha256), with a bad row or key, holding a study another part holds,
    or an exclusion code this sitecal does not write.
    """
    parts = _listed(folder)
    if not parts:
        raise DataError(
            f"{folder}: no predictions part (a .csv with its .csv.part.json) in this folder. Put there "
            "the parts each site's 'sitecal predict' wrote under the network key."
        )
    sidecars = [_sidecar(part, pseudonymize) for part in parts]
    _check_facts(parts, sidecars, facts)
    studies: list[Study] = []
    seen: dict[str, str] = {}
    for part, sidecar in zip(parts, sidecars, strict=True):
        rows = read_rows(
            part,
            class_names=facts.class_names,
            subgroups=facts.subgroups,
            sha256=sidecar.csv_sha256,
            rows=sidecar.rows,
        )
        for study in rows:
            if study.study_key in seen:
                raise DataError(
                    f"{part}: study {study.study_key} is also in {seen[study.study_key]}: a study must be in "
                    "one part only. Was a site's part copied twice, or did two sites send the same studies?"
                )
            seen[study.study_key] = part.name
            studies.append(study)
    flows = [s.flow for s in sidecars]
    found = [f.series_found for f in flows]
    selected = [f.series_selected for f in flows]
    k = min_count_shown
    return Cohort(
        studies=_shown(_resolved(studies, subgroups, pseudonymize, k), subgroups, k),
        exclusions=_exclusions(sidecars),
        files_found=sum(f.files_found for f in flows),
        dicom_instances=sum(f.dicom_instances for f in flows),
        n_studies_found=sum(f.studies for f in flows),
        n_labelled=sum(f.labelled for f in flows),
        attributes=tuple(subgroups),
        n_series_found=None if None in found else sum(n for n in found if n is not None),
        n_series_selected=None if None in selected else sum(n for n in selected if n is not None),
        predictions_file=PredictionsFileSummary(
            rows=len(studies),
            usable_rows=len(studies),
            score_kind="logit",
            pseudonymised=True,
            patients="column",
            labels="predictions file",
        ),
    )


def _listed(folder: Path) -> list[Path]:
    """The parts in ``folder``, refused beyond :data:`MAX_PARTS`."""
    parts = part_files(folder)
    if len(parts) > MAX_PARTS:
        raise DataError(
            f"{folder}: {len(parts)} predictions parts, more than {MAX_PARTS}: put in this folder the parts "
            "of one network's sites only."
        )
    return parts


def _sidecar(part: Path, pseudonymize: Pseudonymizer | None) -> Sidecar:
    """The part's sidecar, its seal verified under the network key (not verified without it)."""
    path = part.with_name(part.name + SIDECAR_SUFFIX)
    try:
        if pseudonymize is None:
            return read_sidecar(path, network_key=None, fingerprint=None)
        return read_sidecar(path, network_key=pseudonymize.key, fingerprint=pseudonymize.fingerprint)
    except FileNotFoundError:
        raise DataError(
            f"{part}: its sidecar {path.name} is missing. Copy both files the site wrote."
        ) from None


def _check_facts(parts: Sequence[Path], sidecars: Sequence[Sidecar], facts: SidecarFacts) -> None:
    """Refuse a part of another model, class list or subgroups, one renamed or missing, or too large."""
    expected = {
        "model_sha256": (facts.model_sha256, "another model"),
        "class_names": (tuple(facts.class_names), "other model.class_names"),
        "subgroups": (tuple(facts.subgroups), "other subgroups"),
    }
    excluded = 0
    for part, sidecar in zip(parts, sidecars, strict=True):
        path = part.with_name(part.name + SIDECAR_SUFFIX)
        for field, (value, meaning) in expected.items():
            if value is not None and getattr(sidecar, field) != value:
                raise DataError(
                    f"{path}: {field} is not this protocol's: the part was written with {meaning}. Every "
                    "site of a network must predict with the network's protocol, model and key."
                )
        if sidecar.model_sha256 != sidecars[0].model_sha256:
            raise DataError(
                f"{part}: written with another model (sha256) than {parts[0].name}: the parts of one "
                "evaluation must all come from one model."
            )
        if sidecar.csv != part.name or not part.is_file():
            raise DataError(
                f"{path}: the part it describes, {part.name}, is missing (or was renamed: a part keeps the "
                "name its site gave it). Copy both files the site wrote."
            )
        if part.stat().st_size > MAX_PART_BYTES:
            raise DataError(
                f"{part}: larger than {MAX_PART_BYTES >> 20} MiB; split the site's cohort in parts."
            )
        excluded += sum(e.count for e in sidecar.exclusions)
        if excluded > _MAX_EXCLUSIONS:
            raise DataError(
                f"{path}: the parts count more than {_MAX_EXCLUSIONS} exclusions together, beyond any "
                f"network's cohort. {_AGAIN}"
            )


def _exclusions(sidecars: Sequence[Sidecar]) -> tuple[Exclusion, ...]:
    """Every site's exclusions, by (stage, reason, unit): one shared record per reason, repeated."""
    counts: Counter[Exclusion] = Counter()
    for sidecar in sidecars:
        for row in sidecar.exclusions:
            counts[row.exclusion()] += row.count
    out: list[Exclusion] = []
    for exclusion in sorted(counts, key=lambda e: (e.stage, e.reason, e.unit)):
        out += [exclusion] * counts[exclusion]
    return tuple(out)


def rare_token(pseudonymize: Pseudonymizer, attribute: str, value: str) -> str:
    """How a value rare at a site leaves it: a keyed hash under the network key (``rare:<32 hex>``).

    Only a holder of the network key who already knows the value can match it: the central evaluation
    matches tokens to the values other sites shipped in clear, and to the protocol's own band labels.
    """
    return "rare:" + pseudonymize.digest("subgroup value", f"{attribute}\0{value}")[:32]


def _tokenised(
    rows: Sequence[Mapping[str, str]], names: Sequence[str], k: int, pseudonymize: Pseudonymizer
) -> list[dict[str, str]]:
    counts = {name: Counter(row[name] for row in rows) for name in names}
    return [
        {
            **row,
            **{
                name: rare_token(pseudonymize, name, row[name])
                for name in names
                if counts[name][row[name]] < k and row[name] not in (UNKNOWN, UNMAPPED)
            },
        }
        for row in rows
    ]


def _resolved(
    studies: list[Study], subgroups: Mapping[str, SubgroupSettings], pseudonymize: Pseudonymizer, k: int
) -> list[Study]:
    """Tokens of site-rare values replaced by the value where the network knows it, else pooled."""
    known: dict[str, str] = {}
    for name, settings in subgroups.items():
        candidates = {s.attributes[name] for s in studies if name in s.attributes}
        if settings.bands is not None:
            candidates |= set(age_band_labels(settings.bands))
        known |= {
            rare_token(pseudonymize, name, value): value
            for value in candidates
            if not value.startswith("rare:")
        }
    resolved = []
    for study in studies:
        values = {
            name: known.get(value, other_value(k)) if value.startswith("rare:") else value
            for name, value in study.attributes.items()
        }
        resolved.append(replace(study, attributes=values))
    return resolved
