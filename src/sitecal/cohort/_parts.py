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
- per site (sidecar): the counts of the flow (files, DICOM instances, studies, labelled, series) and of
  the exclusions by stage and reason (reasons hold no identifier), the model's sha256, the class names, the
  subgroups, the network key's fingerprint (which names the key without revealing it) and the CSV's sha256.

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

import csv
import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from sitecal._io import write_csv_atomic, write_json_atomic
from sitecal._pseudonym import Pseudonymizer
from sitecal._split_key import network_split_keys
from sitecal.cohort._build import _shown
from sitecal.cohort._records import Cohort, Exclusion, PredictionsFileSummary, Study, exclusion_counts
from sitecal.cohort.attributes import UNKNOWN, age_band_labels, other_value
from sitecal.cohort.mapping import UNMAPPED
from sitecal.errors import DataError
from sitecal.protocol import Protocol, SubgroupSettings

__all__ = [
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

#: Names the part's layout; another layout is refused with what to do.
PART_FORMAT = "sitecal-predictions-part/1"
_SIDECAR = ".part.json"
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
#: Larger parts are refused before they are read (a row is a few hundred bytes: about 4 million rows).
MAX_PART_BYTES = 1 << 30
_MAX_SIDECAR_BYTES = 1 << 20
_FLOW = ("files_found", "dicom_instances", "studies", "labelled")
#: Exclusions a sidecar may count (each becomes a record of the central flow).
_MAX_EXCLUSIONS = 10**7


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
    """Write the part (CSV at ``path``) and its sidecar; return the sidecar's path.

    ``studies`` hold their subgroup values unpooled; a value held by fewer than ``min_count_shown`` of them
    leaves the site as its keyed token (:func:`rare_token`), never in clear.
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
    from sitecal.provenance import file_sha256

    sidecar = path.with_name(path.name + _SIDECAR)
    write_json_atomic(
        sidecar,
        {
            "format": PART_FORMAT,
            "csv": path.name,
            "csv_sha256": file_sha256(path),
            "rows": len(studies),
            "model_sha256": facts.model_sha256,
            "network_key_fingerprint": facts.key_fingerprint,
            "class_names": list(facts.class_names),
            "subgroups": names,
            "flow": {
                "files_found": cohort.files_found,
                "dicom_instances": cohort.dicom_instances,
                "studies": cohort.n_studies_found,
                "labelled": cohort.n_labelled,
                "series_found": cohort.n_series_found,
                "series_selected": cohort.n_series_selected,
            },
            "exclusions": exclusion_counts(exclusions),
        },
    )
    return sidecar


def part_files(folder: Path) -> list[Path]:
    """The parts in ``folder``: the CSV beside each sidecar (``<name>.csv.part.json``), by name."""
    return sorted(path.with_name(path.name.removesuffix(_SIDECAR)) for path in folder.glob("*" + _SIDECAR))


def parts_record(folder: Path) -> dict[str, Any]:
    """What provenance records of a network's parts: how many, their rows, the model, each part's sha256."""
    from sitecal.provenance import file_sha256

    parts = part_files(folder)
    sidecars = [json.loads(part.with_name(part.name + _SIDECAR).read_text("utf-8")) for part in parts]
    return {
        "parts": len(sidecars),
        "rows": sum(int(s["rows"]) for s in sidecars),
        "model_sha256": sidecars[0].get("model_sha256") if sidecars else None,
        "network_key_fingerprint": sidecars[0].get("network_key_fingerprint") if sidecars else None,
        "sha256": {part.name: file_sha256(part) for part in parts},
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

    Raises :class:`~sitecal.errors.DataError` naming the part and the fix for a part without its sidecar,
    of another network key, model, class list or subgroups, altered after it was written, with a bad row,
    or holding a study another part holds.
    """
    parts = part_files(folder)
    if not parts:
        raise DataError(
            f"{folder}: no predictions part (a .csv with its .csv.part.json) in this folder. Put there "
            "the parts each site's 'sitecal predict' wrote under the network key."
        )
    studies: list[Study] = []
    seen: dict[str, str] = {}
    models: dict[object, str] = {}
    flow: Counter[str] = Counter()
    series: list[tuple[int | None, int | None]] = []
    excluded: Counter[tuple[str, str, str]] = Counter()
    for part in parts:
        sidecar = _sidecar(part, facts)
        models.setdefault(sidecar.get("model_sha256"), part.name)
        if len(models) > 1:
            raise DataError(
                f"{part}: written with another model (sha256) than {next(iter(models.values()))}: the parts "
                "of one evaluation must all come from one model."
            )
        for name in _FLOW:
            flow[name] += int(sidecar["flow"][name])
        series.append((sidecar["flow"].get("series_found"), sidecar["flow"].get("series_selected")))
        for row in sidecar["exclusions"]:
            excluded[(str(row["stage"]), str(row["reason"]), str(row["unit"]))] += int(row["count"])
        for study in _rows(part, facts, int(sidecar["rows"])):
            if study.study_key in seen:
                raise DataError(
                    f"{part}: study {study.study_key} is also in {seen[study.study_key]}: a study must be in "
                    "one part only. Was a site's part copied twice, or did two sites send the same studies?"
                )
            seen[study.study_key] = part.name
            studies.append(study)
    exclusions = [
        Exclusion(stage=stage, reason=reason, unit=unit)  # type: ignore[arg-type]
        for (stage, reason, unit), count in sorted(excluded.items())
        for _ in range(count)
    ]
    found, selected = zip(*series, strict=True)
    k = min_count_shown
    return Cohort(
        studies=_shown(_resolved(studies, subgroups, pseudonymize, k), subgroups, k),
        exclusions=tuple(exclusions),
        files_found=flow["files_found"],
        dicom_instances=flow["dicom_instances"],
        n_studies_found=flow["studies"],
        n_labelled=flow["labelled"],
        attributes=tuple(subgroups),
        n_series_found=None if None in found else sum(found),
        n_series_selected=None if None in selected else sum(selected),
        predictions_file=PredictionsFileSummary(
            rows=len(studies),
            usable_rows=len(studies),
            score_kind="logit",
            pseudonymised=True,
            patients="column",
            labels="predictions file",
        ),
    )


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


def _sidecar(part: Path, facts: SidecarFacts) -> dict[str, Any]:
    from sitecal.provenance import file_sha256

    path = part.with_name(part.name + _SIDECAR)
    try:
        if path.stat().st_size > _MAX_SIDECAR_BYTES:
            raise DataError(f"{path}: larger than a sidecar can be; copy it again from the site.")
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(
            f"{part}: its sidecar {path.name} is missing. Copy both files the site wrote."
        ) from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DataError(
            f"{path}: cannot read it as JSON ({type(exc).__name__}). Copy it again from the site."
        ) from None
    if not isinstance(document, dict) or document.get("format") != PART_FORMAT:
        raise DataError(f"{path}: not a sitecal predictions part sidecar ({PART_FORMAT}).")
    expected = {
        "network_key_fingerprint": (facts.key_fingerprint, "another network key (privacy.network_key_file)"),
        "model_sha256": (facts.model_sha256, "another model"),
        "class_names": (list(facts.class_names), "other model.class_names"),
        "subgroups": (list(facts.subgroups), "other subgroups"),
    }
    for field, (value, meaning) in expected.items():
        if value is not None and document.get(field) != value:
            raise DataError(
                f"{path}: {field} is not this protocol's: the part was written with {meaning}. Every site of "
                "a network must predict with the network's protocol, model and key."
            )
    if document.get("csv") != part.name or not part.is_file():
        raise DataError(
            f"{path}: the part it describes, {part.name}, is missing (or was renamed: a part keeps the name "
            "its site gave it). Copy both files the site wrote."
        )
    if part.stat().st_size > MAX_PART_BYTES:
        raise DataError(f"{part}: larger than {MAX_PART_BYTES >> 20} MiB; split the site's cohort in parts.")
    try:
        if file_sha256(part) != document.get("csv_sha256"):
            raise DataError(
                f"{part}: its sha256 is not the one its sidecar recorded: the file was changed or cut short "
                "after the site wrote it. Ask the site for it again."
            )
        flow = [
            int(document["flow"][name]) for name in ("files_found", "dicom_instances", "studies", "labelled")
        ]
        excluded = [int(row["count"]) for row in document["exclusions"]]
        texts = [row[f] for row in document["exclusions"] for f in ("stage", "reason", "unit")]
        if not all(isinstance(text, str) for text in texts):
            raise ValueError("exclusions")
        counts = [int(document["rows"]), *flow, *excluded]
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(
            f"{path}: field {exc} is missing or not a number. Copy it again from the site."
        ) from None
    if min(counts) < 0 or sum(excluded) > _MAX_EXCLUSIONS:
        raise DataError(f"{path}: a count is negative or beyond any cohort. Copy it again from the site.")
    return document


def _rows(part: Path, facts: SidecarFacts, n_rows: int) -> list[Study]:
    classes = list(facts.class_names)
    header = ["study_key", "patient_key", "label"]
    header += [f"logit:{c}" for c in classes] + [f"subgroup:{n}" for n in facts.subgroups]
    label_of = {name: i for i, name in enumerate(classes)}
    n_logits = len(classes)
    studies = []
    with part.open(encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh)
        if next(reader, None) != header:
            raise DataError(f"{part}: its columns are not {', '.join(header)}: not a part of this protocol.")
        for line, cells in enumerate(reader, start=2):
            if len(cells) != len(header):
                raise DataError(f"{part}: line {line} has {len(cells)} cells, not {len(header)}.")
            try:
                logits = np.array([float(v) for v in cells[3 : 3 + n_logits]], dtype=np.float64)
            except ValueError:
                raise DataError(f"{part}: line {line}: a logit is not a number.") from None
            if not all(math.isfinite(v) for v in logits) or cells[2] not in label_of:
                raise DataError(f"{part}: line {line}: a logit is not finite, or the label is no class name.")
            study_key, patient_key = cells[0], cells[1]
            split, order = network_split_keys(study_key, patient_key)
            studies.append(
                Study(
                    study_key=study_key,
                    patient_key=patient_key,
                    files=(),
                    relative_path="",
                    instance_uids=(),
                    attributes={
                        name: _uncell(value)
                        for name, value in zip(facts.subgroups, cells[3 + n_logits :], strict=True)
                    },
                    label=label_of[cells[2]],
                    logits=logits,
                    split_key=split,
                    study_order=order,
                )
            )
    if len(studies) != n_rows:
        raise DataError(
            f"{part}: {len(studies)} rows, but its sidecar says {n_rows}. Ask the site for it again."
        )
    return studies


def _uncell(value: str) -> str:
    """A subgroup value as the site had it (undoing the formula escape of :func:`sitecal._io.csv_cell`)."""
    return value[1:] if value.startswith("'") and value[1:].startswith(_FORMULA_START) else value
