"""``provenance.json``: how a run was made, as :func:`sitecal.provenance.provenance_document` writes it.

The record types below are the one description of the file: a run checks the document it writes against
them (what is written must read back), and ``sitecal schema provenance`` prints their JSON Schema. The
software, inputs and seeds are typed field by field; the records of how the scores were obtained
(``inference``, ``predictions_file``, ``network_parts``, ``pacs``) differ by route and are described,
not typed, below.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, ClassVar

from sitecal.results._codec import Record
from sitecal.results._fields import JSON, Constraint, OrAbsent
from sitecal.results._kinds import Count, Sha256

__all__ = ["FileHashCounts", "LogitSources", "ModelRecord", "ProvenanceDocument"]

#: ``SC-`` and twelve upper-case hex digits (:func:`sitecal.provenance.document_id`)
DocumentId = Annotated[str, Constraint(pattern=r"^SC-[0-9A-F]{12}$")]
#: a UTC time to the second, ``YYYY-MM-DDThh:mm:ssZ``
UtcTime = Annotated[str, Constraint(pattern=r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")]


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelRecord(Record):
    """The model the run names: what the protocol says of it, and, when it was run here, its file.

    Attributes
    ----------
    name : str
        The protocol's ``model.name``.
    version : str, optional
        The provider's version, as the protocol gives it.
    format : str, optional
        How the weights were stored (``safetensors``, ``torchscript``, ``monai_bundle``, ...).
    file : str, optional
        The file or bundle folder name (no folder above it).
    architecture : str, optional
        ``package.module:Class`` of an architecture the weights load into.
    architecture_args : object, optional
        Its keyword arguments, JSON values.
    code_sha256 : str, optional
        sha256 of the architecture's source code.
    """

    name: str
    version: OrAbsent[str] = None
    format: OrAbsent[str] = None
    file: OrAbsent[str] = None
    architecture: OrAbsent[str] = None
    architecture_args: OrAbsent[JSON] = None
    code_sha256: OrAbsent[Sha256] = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LogitSources(Record):
    """Where the analysed logits came from, when the model was run here.

    Attributes
    ----------
    cached : int
        Studies whose logits were read from the logit cache (same model, transforms and files).
    computed : int
        Studies the model was run on.
    """

    cached: Count
    computed: Count


@dataclass(frozen=True, slots=True, kw_only=True)
class FileHashCounts(Record):
    """How the DICOM files' sha256 were obtained.

    Attributes
    ----------
    hashed : int
        Files read and hashed by this run.
    reused : int
        Files whose hash was taken from the folder's hash manifest, the file unchanged (size and time).
    """

    hashed: Count
    reused: Count


@dataclass(frozen=True, slots=True, kw_only=True)
class ProvenanceDocument(Record):
    """``provenance.json``: the software, the inputs' sha256, the seeds and the command that made a run.

    Attributes
    ----------
    sitecal_version : str
        The sitecal that made the run.
    python : str
        Python's version.
    platform : str
        The operating system, as ``platform.platform()`` gives it.
    executable : str
        The Python implementation (``cpython``).
    dependencies : Mapping of str to str
        Every runtime dependency of sitecal, transitively, with its installed version.
    created_utc : str
        When the run started (UTC); the report is dated by it.
    command_line : str
        The command, shell-quoted.
    run_folder : str
        The run folder's name.
    seeds : Mapping of str to int
        The split's and the bootstrap's seeds.
    sha256 : Mapping of str to str (or to a mapping of str to str)
        sha256 of each input (protocol, model, labels, predictions_file, dataset_manifest, instances), of
        each part of a network (predictions_parts: part file name to sha256) and of the predictions the
        run wrote (predictions).
    document_id : str
        The report's document ID, from the inputs' sha256 and the time.
    model : ModelRecord
        The model.
    transforms_sha256 : str or None
        sha256 of the preprocessing transforms; null when the model was not run here.
    device : str or None
        Where the model ran (``cpu``, ``cuda:0``); null when it was not run here.
    pseudonym_key_fingerprint : str
        The first 16 hex digits of a hash of the site key the pseudonyms were made with (the key itself is
        never written); empty for arrays given in Python, which have no pseudonyms.
    logits : LogitSources, optional
        Where the logits came from, when the model was run here.
    inference : object, optional
        When the model was run here: how (batch size, Dask workers, the numeric precision used and its
        check), as ``sitecal.inference`` records it.
    predictions_file : object, optional
        When the scores were read from a predictions file (or given as arrays): its rows, usable rows,
        score kind, key, where patients, labels and subgroups came from.
    network_parts : object, optional
        When the scores came from a network's sites: how many parts, their rows, the model's sha256, the
        network key's fingerprint.
    file_hashes : FileHashCounts, optional
        When DICOM files were read: how their sha256 were obtained.
    pacs : object, optional
        When the studies came from a PACS: what was asked and what came back, as counts and hashes (no
        identifier).
    """

    FILE_NAME: ClassVar[str] = "provenance.json"
    HINT: ClassVar[str] = " The run folder was edited or written by a faulty sitecal; run the protocol again."

    sitecal_version: str
    python: str
    platform: str
    executable: str
    dependencies: Mapping[str, str]
    created_utc: UtcTime
    command_line: str
    run_folder: str
    seeds: Mapping[str, int]
    sha256: Mapping[str, Sha256 | Mapping[str, Sha256]]
    document_id: DocumentId
    model: ModelRecord
    transforms_sha256: Sha256 | None
    device: str | None
    pseudonym_key_fingerprint: str
    logits: OrAbsent[LogitSources] = None
    inference: OrAbsent[JSON] = None
    predictions_file: OrAbsent[JSON] = None
    network_parts: OrAbsent[JSON] = None
    file_hashes: OrAbsent[FileHashCounts] = None
    pacs: OrAbsent[JSON] = None
