"""Reading a protocol file: YAML (safe loader, no duplicate keys) → schema, errors as ``file:line: field``.

A protocol is a few kilobytes of hand-written YAML, so anything far beyond that is refused before it is
parsed into objects: a file over :data:`MAX_PROTOCOL_BYTES`, mappings and lists nested deeper than
:data:`MAX_YAML_DEPTH`, and more than :data:`MAX_YAML_NODES` nodes once aliases are expanded (a "billion
laughs" file of a few lines of anchors and aliases expands to billions). The checks read the parser's event
stream with a counter per anchor, so they cost one pass over the text whatever the file holds. Schema
errors are worded with their lines by :mod:`sitecal.protocol._validation_errors`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from sitecal.errors import ProtocolError
from sitecal.protocol._pacs import source_id
from sitecal.protocol._schema import Protocol
from sitecal.protocol._validation_errors import _format_validation_error

__all__ = [
    "MAX_PROTOCOL_BYTES",
    "MAX_YAML_DEPTH",
    "MAX_YAML_NODES",
    "LoadedProtocol",
    "YamlExcess",
    "load_protocol",
    "protocol_summary",
    "yaml_excess",
]

#: Largest protocol file read, in bytes (1 MiB); a protocol is a few kilobytes.
MAX_PROTOCOL_BYTES = 1 << 20
#: Most YAML nodes (mappings, lists and scalars, keys included) once aliases are expanded; a protocol has a
#: few hundred.
MAX_YAML_NODES = 100_000
#: Deepest nesting of mappings and lists; a protocol needs fewer than ten levels.
MAX_YAML_DEPTH = 50


@dataclass(frozen=True)
class LoadedProtocol:
    """A validated protocol with where it came from and its paths resolved."""

    protocol: Protocol
    path: Path
    text: str
    sha256: str

    def resolve(self, value: str) -> Path:
        """Resolve a protocol path relative to the protocol file's folder (``sitecal:`` = package data)."""
        if value.startswith("sitecal:"):
            from importlib.resources import files

            return Path(str(files("sitecal").joinpath(value.removeprefix("sitecal:"))))
        path = Path(value).expanduser()
        return path if path.is_absolute() else (self.path.parent / path).resolve()

    @property
    def dicom_dir(self) -> Path | None:
        """The folder of DICOM files to scan (``None`` for a predictions file without DICOM).

        With ``data.source`` (a PACS): the store the studies are retrieved into,
        ``<output_dir>/.sitecal-pacs/<source id>/files``.
        """
        if self.parts:  # a network's evaluation reads the sites' parts only
            return None
        source = self.protocol.data.source
        if source is not None:
            return self.pacs_store / "files"
        return self._optional(self.protocol.data.dicom_dir)

    @property
    def parts(self) -> bool:
        """Whether the model's outputs are a folder of sites' parts (:mod:`sitecal.cohort._parts`).

        Such an evaluation reads the parts only: no DICOM folder, labels table or PACS is read or checked.
        """
        path = self.predictions_path
        return path is not None and path.is_dir()

    @property
    def pacs_store(self) -> Path:
        """The local store of a PACS source's studies (whether or not the protocol has one)."""
        source = self.protocol.data.source
        name = "none" if source is None else source_id(source)
        return self.output_root / ".sitecal-pacs" / name

    @property
    def labels_path(self) -> Path | None:
        """The ground-truth table (``None`` when the labels are a column of the predictions file)."""
        return None if self.parts else self._optional(self.protocol.data.labels)

    @property
    def predictions_path(self) -> Path | None:
        """The file of the model's outputs per study (``None`` when the model is run here)."""
        return self._optional(self.protocol.data.predictions)

    @property
    def model_path(self) -> Path | None:
        """The model file (or folder); ``None`` when a predictions file stands for a model not given."""
        return self._optional(self.protocol.model.path)

    def _optional(self, value: str | None) -> Path | None:
        return None if value is None else self.resolve(value)

    def with_predictions(self, path: Path) -> LoadedProtocol:
        """The same protocol reading the model's outputs from ``path`` (``--predictions``) instead."""
        data = self.protocol.data.model_copy(update={"predictions": str(path.resolve())})
        return replace(self, protocol=self.protocol.model_copy(update={"data": data}))

    @property
    def output_root(self) -> Path:
        """The folder that receives run folders."""
        return self.resolve(self.protocol.report.output_dir)

    @property
    def logit_cache_dir(self) -> Path | None:
        """The logit cache folder, or ``None`` when ``inputs.logit_cache`` is off."""
        inputs = self.protocol.inputs
        if not inputs.logit_cache:
            return None
        if inputs.logit_cache_dir is not None:
            return self.resolve(inputs.logit_cache_dir)
        return self.output_root / ".sitecal-logit-cache"

    @property
    def hash_manifest_path(self) -> Path:
        """Where the sha256 of unchanged DICOM files is remembered (:mod:`sitecal._hash_manifest`)."""
        return self.output_root / ".sitecal-file-hashes.sqlite"

    @property
    def key_file(self) -> Path:
        """The secret for pseudonymisation: the network's key when the protocol names one, else the site's."""
        privacy = self.protocol.privacy
        if privacy.network_key_file:
            return self.resolve(privacy.network_key_file)
        return (
            self.resolve(privacy.key_file)
            if privacy.key_file
            else self.output_root / ".sitecal-pseudonym-key"
        )

    @property
    def network(self) -> bool:
        """Whether keys are under a network's shared key (``privacy.network_key_file``)."""
        return self.protocol.privacy.network_key_file is not None

    def pseudonym_key(self) -> bytes:
        """The pseudonymisation key: the network's (read, never created) or the site's (created if absent)."""
        from sitecal._pseudonym import load_network_key, load_or_create_key

        return load_network_key(self.key_file) if self.network else load_or_create_key(self.key_file)


def load_protocol(path: str | Path) -> LoadedProtocol:
    """Read, parse and validate a protocol file.

    Parameters
    ----------
    path : str or Path
        The YAML protocol.

    Returns
    -------
    LoadedProtocol
        The validated protocol, its text and sha256.

    Raises
    ------
    ProtocolError
        When the file is missing or unreadable, is not valid YAML, has duplicate keys, or does not follow the
        schema. The message lists every problem as ``file:line: field: what is wrong``.
    """
    path = Path(path)
    raw = _read_bounded(path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(
            f"{path}: the protocol is not UTF-8 text (byte {exc.start}). Save it as UTF-8."
        ) from None
    try:
        excess = yaml_excess(text, max_nodes=MAX_YAML_NODES, max_depth=MAX_YAML_DEPTH)
        if excess is not None:
            raise ProtocolError(f"{path}:{excess.line}: the protocol {excess.problem}.")
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        if root is None:
            raise ProtocolError(
                f"{path}: the protocol is empty. Start from a copy of sitecal-demo/demo.yaml "
                "('sitecal demo --generate-only' writes it)."
            )
        _reject_duplicate_keys(root, path, set())
        data = _construct(root)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ProtocolError(
            f"{where}: invalid YAML: {problem}. Fix the syntax and run 'sitecal check' again."
        ) from None
    except ProtocolError:
        raise  # a ValueError too, already worded
    except ValueError as exc:  # from the constructor: a date such as 2024-13-45, an int of 5000 digits
        problem = str(exc).splitlines()[0].split(";")[0] if str(exc).strip() else type(exc).__name__
        raise ProtocolError(
            f"{path}: invalid YAML value: {problem}. Fix the value and run 'sitecal check' again."
        ) from None
    except RecursionError:  # a second lock: the depth limit above keeps every walk shallow
        raise ProtocolError(
            f"{path}: the protocol is nested too deeply to read. A protocol needs fewer than ten levels; "
            "flatten it."
        ) from None
    if not isinstance(data, dict):
        raise ProtocolError(
            f"{path}:1: the protocol must be a mapping of fields (name:, model:, data:, ...)."
        )
    try:
        protocol = Protocol.model_validate(data)
    except ValidationError as exc:
        raise ProtocolError(_format_validation_error(exc, root, path)) from None
    except RecursionError:
        raise ProtocolError(f"{path}: the protocol is nested too deeply to validate. Flatten it.") from None
    return LoadedProtocol(
        protocol=protocol, path=path.resolve(), text=text, sha256=hashlib.sha256(raw).hexdigest()
    )


def _read_bounded(path: Path) -> bytes:
    """The file's bytes; a path that is not a regular file or is over the size limit is refused unread."""
    try:
        if not path.is_file():
            if not path.exists():
                raise ProtocolError(f"{path}: protocol file not found. Check the path.")
            # a FIFO or device would block or never end; a folder is a mistake
            raise ProtocolError(f"{path}: not a regular file. Give the path of a protocol YAML file.")
        with path.open("rb") as stream:
            raw = stream.read(MAX_PROTOCOL_BYTES + 1)
    except FileNotFoundError:
        raise ProtocolError(f"{path}: protocol file not found. Check the path.") from None
    except OSError as exc:
        raise ProtocolError(f"{path}: cannot read the protocol ({exc.strerror}).") from None
    if len(raw) > MAX_PROTOCOL_BYTES:
        raise ProtocolError(
            f"{path}: the protocol is larger than {MAX_PROTOCOL_BYTES} bytes (1 MiB); a protocol is a few "
            "kilobytes of YAML. Check that this is the protocol file."
        )
    return raw


@dataclass(frozen=True)
class YamlExcess:
    """Where and how a YAML text goes past a limit of :func:`yaml_excess`.

    Attributes
    ----------
    line : int
        1-based line of the node that went past the limit.
    problem : str
        What went past it, e.g. ``"is nested deeper than 50 levels of mappings and lists"``; it starts
        with a verb so that callers put the document's name before it.
    """

    line: int
    problem: str


def yaml_excess(text: str, *, max_nodes: int, max_depth: int) -> YamlExcess | None:
    r"""The first way ``text`` goes past the node or depth limit, or None; read before composing it.

    One pass over the parser's events (no recursion, nothing built): each scalar, mapping and list counts
    one node, and an alias counts the expanded size of its anchor, remembered per anchor, so that nested
    aliases are counted without being expanded.

    Parameters
    ----------
    text : str
        A YAML document.
    max_nodes : int
        Most nodes allowed once aliases are expanded.
    max_depth : int
        Deepest nesting of mappings and lists allowed (a top-level mapping is depth 1).

    Returns
    -------
    YamlExcess or None
        The line and the problem; None when the text is within both limits.

    Raises
    ------
    yaml.YAMLError
        When the text is not YAML (the caller reports the syntax error as it does for any YAML error).

    Examples
    --------
    >>> yaml_excess("a: &x [1, 2]\nb: [*x, *x]\n", max_nodes=100, max_depth=5) is None
    True
    >>> yaml_excess("a: &x [1, 2]\nb: [*x, *x]\n", max_nodes=8, max_depth=5).problem
    'uses YAML aliases that expand to more than 8 nodes'
    """
    open_nodes: list[list[Any]] = []  # [anchor, expanded size] of each mapping or list not yet closed
    sizes: dict[str, int] = {}
    total = 0
    aliased = False
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        line = int(event.start_mark.line) + 1
        if isinstance(event, yaml.CollectionEndEvent):
            # its nodes are in ``total`` already; its parent gets its size now that it is known
            anchor, size = open_nodes.pop()
            if anchor is not None:
                sizes[anchor] = size
            if open_nodes:
                open_nodes[-1][1] += size
            continue
        if isinstance(event, yaml.CollectionStartEvent):
            open_nodes.append([event.anchor, 1])
            if len(open_nodes) > max_depth:
                return YamlExcess(line, f"is nested deeper than {max_depth} levels of mappings and lists")
            total += 1
        elif isinstance(event, yaml.AliasEvent | yaml.ScalarEvent):
            if isinstance(event, yaml.AliasEvent):
                if any(anchor == event.anchor for anchor, _ in open_nodes):
                    return YamlExcess(line, f"has an alias (*{event.anchor}) inside the node it names")
                size, aliased = sizes.get(str(event.anchor), 1), True  # undefined: compose reports it
            else:
                size = 1
                if event.anchor is not None:
                    sizes[event.anchor] = 1
            if open_nodes:
                open_nodes[-1][1] += size
            total += size
        if total > max_nodes:
            what = "uses YAML aliases that expand to" if aliased else "holds"
            return YamlExcess(line, f"{what} more than {max_nodes} nodes")
    return None


def _construct(root: yaml.Node) -> Any:
    """The plain data of a composed document, built as ``yaml.safe_load`` builds it, without parsing again."""
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_document(root)
    finally:
        loader.dispose()


def _reject_duplicate_keys(node: yaml.Node, path: Path, done: set[int]) -> None:
    # an alias is the same node object as its anchor: check it once (``done`` holds node ids)
    if id(node) in done:
        return
    done.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key, value in node.value:
            name = str(key.value)
            if name in seen:
                raise ProtocolError(
                    f"{path}:{key.start_mark.line + 1}: '{name}' appears twice in the same mapping "
                    f"(first on line {seen[name]}). Keep one."
                )
            seen[name] = key.start_mark.line + 1
            _reject_duplicate_keys(value, path, done)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _reject_duplicate_keys(item, path, done)


def protocol_summary(loaded: LoadedProtocol) -> Mapping[str, Any]:
    """The protocol facts the report prints (plain data).

    ``governance`` maps each of ``report.governance``'s fields (ethics_approval, reference_standard,
    interpretation, human_oversight) to its text, or to ``None`` where the protocol does not give it;
    ``design`` maps ``report.design``'s fields (collection, acquisition) likewise.
    """
    p = loaded.protocol
    return {
        "name": p.name,
        "title": p.report.title,
        "intended_use": p.intended_use,
        "sha256": loaded.sha256,
        "yaml_text": loaded.text,
        "sign_off": list(p.report.sign_off),
        "source_path": loaded.path.name,
        "governance": p.report.governance.model_dump(),
        "design": p.report.design.model_dump(),
    }
