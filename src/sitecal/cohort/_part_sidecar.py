"""A network part's sidecar: what the part says of itself, sealed under the network's key.

The sidecar (``<part>.part.json``) is the one document of a part besides its rows (:mod:`._parts`);
:class:`Sidecar` writes it and reads it back. It carries a MAC (HMAC-SHA256) under a key derived from the
network key, over its canonical content, which holds the part's sha256: a site that holds the network key
can write a part, anyone else who edits a byte of the part or of its sidecar (and recomputes the plain
sha256) is found out. Exclusion reasons travel as codes of a closed vocabulary
(:mod:`._exclusion_codes`), never as text.

The sidecar is read within bounds before anything of it is used: a regular file (never a FIFO) of at most
:data:`MAX_SIDECAR_BYTES`, nested at most :data:`MAX_SIDECAR_DEPTH` deep (checked on its bytes, without
recursion, before the JSON parser recurses), with exactly the fields sitecal writes, each of its type.
"""

from __future__ import annotations

import hmac
import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sitecal._dicomfile import NotRegularFile, open_regular
from sitecal._io import json_depth, write_json_atomic
from sitecal.cohort._exclusion_codes import reason_code, reason_of
from sitecal.cohort._records import UNITS, Exclusion, Unit
from sitecal.errors import DataError

__all__ = [
    "MAX_SIDECAR_BYTES",
    "MAX_SIDECAR_DEPTH",
    "PART_FORMAT",
    "SIDECAR_SUFFIX",
    "ExcludedCount",
    "PartFlow",
    "Sidecar",
    "json_depth",
    "part_mac",
    "read_sidecar",
]

#: Names the part's layout; another layout is refused with what to do. (``/1`` had no seal and shipped
#: exclusion reasons as text.)
PART_FORMAT = "sitecal-predictions-part/2"
_EARLIER_FORMATS = ("sitecal-predictions-part/1",)
SIDECAR_SUFFIX = ".part.json"
#: A sidecar is a few kilobytes (its exclusions are at most a few hundred (code, unit) rows): 1 MiB is far
#: above any real one and small enough to read whole.
MAX_SIDECAR_BYTES = 1 << 20
#: A sidecar nests 3 deep (the document, ``exclusions``, one row); JSON nested deeper is refused before it
#: is parsed (the parser recurses once per level: 100,000 levels would end in RecursionError).
MAX_SIDECAR_DEPTH = 8
#: (code, unit) rows a sidecar may list: the vocabulary's codes times the units, with room to spare.
_MAX_EXCLUSION_ROWS = 4096
#: What the network key is turned into before it seals a part: a key for this use only, so that a part's
#: MAC is never a pseudonym or a key fingerprint of the same key (those use the key directly).
_PART_KEY_LABEL = b"sitecal network part v1"
_SHA256 = re.compile(r"[0-9a-f]{64}")
_FINGERPRINT = re.compile(r"[0-9a-f]{16}")
#: A JSON string, or an unterminated one (a lone backslash last included) to the end of the text. It
#: matches at every quote it meets and never backtracks (possessive), so the scan is linear: a text of
#: escaped quotes cannot make it quadratic (a 1 MiB sidecar of any content is scanned in milliseconds).
_FIELDS = {
    "format",
    "mac",
    "csv",
    "csv_sha256",
    "rows",
    "model_sha256",
    "network_key_fingerprint",
    "class_names",
    "subgroups",
    "flow",
    "exclusions",
}
_AGAIN = "Ask the site for both files of its part again."


@dataclass(frozen=True)
class PartFlow:
    """A site's counts of the flow, from files found to studies labelled (series: volumes only)."""

    files_found: int
    dicom_instances: int
    studies: int
    labelled: int
    series_found: int | None
    series_selected: int | None


@dataclass(frozen=True)
class ExcludedCount:
    """How many of a site's exclusions have one reason code (:mod:`._exclusion_codes`) and unit."""

    code: str
    unit: Unit
    count: int

    def exclusion(self) -> Exclusion:
        """The exclusion these stand for centrally: the code's stage and sitecal's own sentence."""
        entry = reason_of(self.code)
        assert entry is not None  # read_sidecar refused any other code
        return Exclusion(stage=entry.stage, reason=entry.sentence, unit=self.unit)


@dataclass(frozen=True)
class Sidecar:
    """What a part says of itself; :meth:`write` seals it, :func:`read_sidecar` verifies and reads it."""

    csv: str
    csv_sha256: str
    rows: int
    model_sha256: str | None
    network_key_fingerprint: str
    class_names: tuple[str, ...]
    subgroups: tuple[str, ...]
    flow: PartFlow
    exclusions: tuple[ExcludedCount, ...]

    @staticmethod
    def counted(exclusions: Sequence[Exclusion]) -> tuple[ExcludedCount, ...]:
        """``exclusions`` as a part ships them: counts by (reason code, unit), in order of first seen."""
        counts = Counter((reason_code(e.stage, e.reason), e.unit) for e in exclusions)
        return tuple(ExcludedCount(code, unit, n) for (code, unit), n in counts.items())

    def document(self) -> dict[str, Any]:
        """The sidecar's content, without its MAC."""
        return {
            "format": PART_FORMAT,
            "csv": self.csv,
            "csv_sha256": self.csv_sha256,
            "rows": self.rows,
            "model_sha256": self.model_sha256,
            "network_key_fingerprint": self.network_key_fingerprint,
            "class_names": list(self.class_names),
            "subgroups": list(self.subgroups),
            "flow": {
                "files_found": self.flow.files_found,
                "dicom_instances": self.flow.dicom_instances,
                "studies": self.flow.studies,
                "labelled": self.flow.labelled,
                "series_found": self.flow.series_found,
                "series_selected": self.flow.series_selected,
            },
            "exclusions": [{"code": e.code, "unit": e.unit, "count": e.count} for e in self.exclusions],
        }

    def write(self, path: Path, network_key: bytes) -> None:
        """Write the sidecar at ``path``, sealed with a MAC under ``network_key``."""
        document = self.document()
        write_json_atomic(path, document | {"mac": part_mac(network_key, document)})


def part_mac(network_key: bytes, document: Mapping[str, Any]) -> str:
    """The MAC of a sidecar's content (``document`` without its ``mac``): 64 hex digits.

    ``HMAC-SHA256(HMAC-SHA256(network_key, "sitecal network part v1"), canonical JSON of document)``, the
    canonical JSON having sorted keys, no spaces and ASCII only, so that a sidecar reformatted by hand
    keeps its MAC and one changed in any value loses it. The document holds the part's sha256, so the MAC
    covers the part's every byte too.
    """
    key = hmac.digest(network_key, _PART_KEY_LABEL, "sha256")
    content = {name: value for name, value in document.items() if name != "mac"}
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hmac.digest(key, canonical.encode("ascii"), "sha256").hex()


def read_sidecar(path: Path, *, network_key: bytes | None, fingerprint: str | None) -> Sidecar:
    """The sidecar at ``path``, read within bounds, its MAC verified under ``network_key``.

    ``fingerprint`` is the network key's (:attr:`sitecal._pseudonym.Pseudonymizer.fingerprint`): a sidecar
    naming another key is refused as such before its MAC is checked (which it would fail). Without
    ``network_key`` (and ``fingerprint``), the MAC is not verified (provenance's record of parts already
    read, :func:`sitecal.cohort._parts.parts_record`): every other check holds.

    Raises
    ------
    DataError
        Naming ``path``, for a sidecar that is missing, not a regular file, too large or too deep, not
        JSON, of another layout or network key, whose MAC does not match its content, or whose fields are
        not those sitecal writes (an exclusion code that is not in the vocabulary included). No value of
        the sidecar is shown.
    """
    document = _load(path)
    if not isinstance(document, dict) or document.get("format") != PART_FORMAT:
        earlier = isinstance(document, dict) and document.get("format") in _EARLIER_FORMATS
        raise DataError(
            f"{path}: written by an earlier sitecal, without the network's seal: ask the site to run "
            "'sitecal predict' again with this version."
            if earlier
            else f"{path}: not a sitecal predictions part sidecar ({PART_FORMAT})."
        )
    if fingerprint is not None and document.get("network_key_fingerprint") != fingerprint:
        raise DataError(
            f"{path}: network_key_fingerprint is not this protocol's: the part was written with another "
            "network key (privacy.network_key_file). Every site of a network must predict with the "
            "network's protocol, model and key."
        )
    mac = document.get("mac")
    if network_key is not None and not (
        isinstance(mac, str) and hmac.compare_digest(mac, part_mac(network_key, document))
    ):
        raise DataError(
            f"{path}: its seal (mac) does not match its content under the network key: this sidecar, or "
            f"the part it describes ({path.name.removesuffix(SIDECAR_SUFFIX)}) with the sha256 recorded "
            f"here, was changed after the site wrote it. {_AGAIN}"
        )
    return _fields(path, document)


def _load(path: Path) -> Any:
    """The JSON at ``path``, read only if it is a regular file within the size and depth bounds."""
    try:
        with open_regular(path) as fh:
            data = fh.read(MAX_SIDECAR_BYTES + 1)
    except FileNotFoundError:
        raise
    except (NotRegularFile, OSError) as exc:
        raise DataError(f"{path}: cannot read it ({exc.strerror or exc}). {_AGAIN}") from None
    if len(data) > MAX_SIDECAR_BYTES:
        raise DataError(f"{path}: larger than a sidecar can be ({MAX_SIDECAR_BYTES >> 20} MiB). {_AGAIN}")
    if json_depth(data) > MAX_SIDECAR_DEPTH:
        raise DataError(
            f"{path}: nested deeper than a sidecar is ({MAX_SIDECAR_DEPTH} levels at most): not a sidecar "
            f"sitecal wrote. {_AGAIN}"
        )
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise DataError(f"{path}: cannot read it as JSON ({type(exc).__name__}). {_AGAIN}") from None


def _fields(path: Path, document: dict[str, Any]) -> Sidecar:
    """The sealed document as a :class:`Sidecar`, each field checked for what sitecal writes there."""

    def bad(field: str, what: str) -> DataError:
        return DataError(f"{path}: field {field} is missing or not {what}. {_AGAIN}")

    if set(document) != _FIELDS:
        raise DataError(f"{path}: its fields are not those of a sidecar sitecal writes. {_AGAIN}")
    texts = {name: document[name] for name in ("csv", "csv_sha256", "network_key_fingerprint")}
    if not all(isinstance(text, str) for text in texts.values()) or not _SHA256.fullmatch(
        texts["csv_sha256"]
    ):
        raise bad("csv_sha256", "a sha256")
    model = document["model_sha256"]
    if model is not None and not (isinstance(model, str) and _SHA256.fullmatch(model)):
        raise bad("model_sha256", "a sha256")
    if not _FINGERPRINT.fullmatch(texts["network_key_fingerprint"]):
        raise bad("network_key_fingerprint", "a key fingerprint")
    names = {name: document[name] for name in ("class_names", "subgroups")}
    for name, value in names.items():
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise bad(name, "a list of names")
    flow = document["flow"]
    counts = ("files_found", "dicom_instances", "studies", "labelled")
    if not isinstance(flow, dict) or set(flow) != {*counts, "series_found", "series_selected"}:
        raise bad("flow", "the counts of the flow")
    if not all(_count(flow[name]) for name in counts) or not all(
        flow[name] is None or _count(flow[name]) for name in ("series_found", "series_selected")
    ):
        raise bad("flow", "counts (whole numbers, 0 or more)")
    if not _count(document["rows"]):
        raise bad("rows", "a count")
    return Sidecar(
        csv=texts["csv"],
        csv_sha256=texts["csv_sha256"],
        rows=document["rows"],
        model_sha256=model,
        network_key_fingerprint=texts["network_key_fingerprint"],
        class_names=tuple(names["class_names"]),
        subgroups=tuple(names["subgroups"]),
        flow=PartFlow(**flow),
        exclusions=_exclusions(path, document["exclusions"]),
    )


def _exclusions(path: Path, rows: Any) -> tuple[ExcludedCount, ...]:
    """The exclusion rows: a known code, a unit and a count each. A code is never shown (it is the peer's)."""
    if not isinstance(rows, list) or len(rows) > _MAX_EXCLUSION_ROWS:
        raise DataError(
            f"{path}: field exclusions is not a list of at most {_MAX_EXCLUSION_ROWS} rows. {_AGAIN}"
        )
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or set(row) != {"code", "unit", "count"} or not _count(row["count"]):
            raise DataError(f"{path}: exclusions[{i}] is not a code, a unit and a count. {_AGAIN}")
        if reason_of(row["code"]) is None:
            raise DataError(
                f"{path}: exclusions[{i}]: its reason code is not one of this sitecal's (the code is not "
                "shown). Every site must predict with the sitecal version of the evaluation: ask the site "
                "to run 'sitecal predict' again with it."
            )
        if row["unit"] not in UNITS:
            raise DataError(f"{path}: exclusions[{i}]: its unit is not one of {', '.join(UNITS)}. {_AGAIN}")
        out.append(ExcludedCount(row["code"], row["unit"], row["count"]))
    return tuple(out)


def _count(value: object) -> bool:
    """Whether ``value`` is a count as sitecal writes one: a JSON integer, 0 or more (not a bool)."""
    return type(value) is int and value >= 0
