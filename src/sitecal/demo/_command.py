"""What ``sitecal demo`` does before the run: a demo protocol in the working folder, its cohort beside it.

Without ``--protocol``, the demo protocol shipped in the package (``sitecal/demo/protocols/``) is copied
into the demo folder of the working folder on first use, and the cohort it points at is generated beside
the copy. Nothing is written inside the installed package::

    sitecal-demo/demo.yaml        the radiograph protocol (sitecal demo)
    sitecal-demo/radiographs/     its cohort: dicom/, labels.csv, manifest.json, .sitecal-demo.json
    sitecal-demo/demo-ct.yaml     the CT protocol (sitecal demo --ct)
    sitecal-demo/ct/              its cohort
    reports/                      run folders (the protocols' report.output_dir is ../reports)

The copies' data paths are relative to the copy; their model path, ``sitecal:demo/...``, is the weights
inside the installed package. A copy is never overwritten: one that differs from the packaged protocol
(edited, or from another sitecal version) is refused with the two ways on. With ``--protocol PATH`` the
user's own copy is run instead, its cohort generated at its ``data.dicom_dir``'s parent folder.

A cohort is regenerated only when its stamp (kind, size, seed, sitecal version) differs, and a folder
that holds anything not made by ``sitecal demo`` is never touched.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from importlib import resources
from pathlib import Path

from .. import __version__
from .._io import write_text_atomic
from .._validation import check_option
from ..errors import DataError, OutputError, ProtocolError
from ..protocol import load_protocol
from .ct.generate import generate_ct_demo
from .generate import generate_demo

__all__ = [
    "DEMO_FOLDER",
    "MIN_DEMO_STUDIES",
    "DemoKind",
    "PreparedDemo",
    "default_studies",
    "demo_protocol_path",
    "ensure_cohort",
    "prepare_demo",
]

logger = logging.getLogger(__name__)


class DemoKind(StrEnum):
    """The two demos: chest radiographs (2-D, the default) and chest CT volumes."""

    RADIOGRAPH = "radiograph"
    CT = "ct"


@dataclass(frozen=True)
class _Spec:
    protocol: str  # file name, in the package and in the demo folder
    default_studies: int
    generate: Callable[..., object]  # (out_dir, *, n_studies, seed, progress) -> its manifest


# One entry per demo: its packaged protocol (whose data.dicom_dir names the cohort folder), its size and
# its generator.
_SPECS = {
    DemoKind.RADIOGRAPH: _Spec("demo.yaml", 2000, generate_demo),
    # about 200 per scanner: with 300, a 46-study fit split gave one scanner T = 3.1
    DemoKind.CT: _Spec("demo-ct.yaml", 600, generate_ct_demo),
}

#: Where ``sitecal demo`` keeps its protocol copies and cohorts, relative to the working folder.
DEMO_FOLDER = Path("sitecal-demo")
#: Fewest studies ``sitecal demo`` generates (fewer leave the per-scanner groups nearly empty).
MIN_DEMO_STUDIES = 50
_STAMP = ".sitecal-demo.json"
_GENERATED = ("dicom", "labels.csv", "manifest.json")


@dataclass(frozen=True)
class PreparedDemo:
    """A demo protocol ready to run, and its cohort.

    Attributes
    ----------
    protocol : pathlib.Path
        The protocol file to run (the copy in the demo folder, or the user's ``--protocol``).
    cohort_dir : pathlib.Path
        The cohort's folder: ``dicom/``, ``labels.csv`` and ``manifest.json``.
    kind : DemoKind
        Which demo.
    n_studies : int
        The cohort's size.
    generated : bool
        Whether the cohort was generated now (False: the same one was already there).
    """

    protocol: Path
    cohort_dir: Path
    kind: DemoKind
    n_studies: int
    generated: bool


def default_studies(kind: DemoKind | str) -> int:
    """Size of the demo cohort of ``kind`` when ``--studies`` is not given (2,000 radiographs, 600 CT)."""
    return _SPECS[_kind(kind)].default_studies


def demo_protocol_path(kind: DemoKind | str = DemoKind.RADIOGRAPH) -> Path:
    """The packaged demo protocol of ``kind``: read it or copy it, never run it where it is.

    Parameters
    ----------
    kind : {"radiograph", "ct"}, default "radiograph"

    Returns
    -------
    pathlib.Path
        ``demo.yaml`` or ``demo-ct.yaml`` inside the installed package.

    Examples
    --------
    >>> demo_protocol_path("ct").name
    'demo-ct.yaml'
    """
    name = _SPECS[_kind(kind)].protocol
    return Path(str(resources.files("sitecal.demo").joinpath("protocols", name)))


def prepare_demo(
    protocol: Path | None = None,
    *,
    kind: DemoKind | str | None = None,
    n_studies: int | None = None,
    seed: int = 0,
    progress: bool = False,
    home: Path = DEMO_FOLDER,
) -> PreparedDemo:
    """Put a demo protocol in place and generate its cohort (unless the same one is already there).

    Parameters
    ----------
    protocol : pathlib.Path, optional
        A demo protocol of the user's (``--protocol``). Its kind is its ``inputs.kind``; its cohort goes to
        the parent folder of its ``data.dicom_dir``, and ``data.labels`` must be ``labels.csv`` there.
        Default: the packaged protocol of ``kind``, copied into ``home``.
    kind : {"radiograph", "ct"}, optional
        Which packaged demo; default "radiograph". With ``protocol``, it must agree with the protocol.
    n_studies : int, optional
        Cohort size, at least :data:`MIN_DEMO_STUDIES`; default :func:`default_studies`.
    seed : int, default 0
        Generator seed.
    progress : bool, default False
        Show the generator's progress bar.
    home : pathlib.Path, default ``sitecal-demo``
        The demo folder (relative paths are relative to the working folder).

    Returns
    -------
    PreparedDemo

    Raises
    ------
    DataError
        If ``kind`` is unknown or ``n_studies`` too small.
    ProtocolError
        If ``protocol`` is missing or invalid, disagrees with ``kind``, or keeps its labels elsewhere.
    OutputError
        If a copy in ``home`` differs from the packaged protocol, or the cohort folder holds files that
        ``sitecal demo`` did not make.
    """
    asked = None if kind is None else _kind(kind)
    if n_studies is not None and n_studies < MIN_DEMO_STUDIES:
        raise DataError(f"--studies must be at least {MIN_DEMO_STUDIES}. Got {n_studies}.")
    if protocol is None:
        protocol = _install_protocol(asked or DemoKind.RADIOGRAPH, Path(home))
    elif not Path(protocol).is_file():
        raise ProtocolError(
            f"{protocol}: demo protocol not found. Give the path of your copy, or leave out --protocol to "
            "run the packaged demo."
        )
    loaded = load_protocol(protocol)
    found = DemoKind.CT if loaded.protocol.inputs.kind == "volume" else DemoKind.RADIOGRAPH
    if asked is not None and asked != found:
        raise ProtocolError(
            f"{protocol}: a {found.value} protocol (inputs.kind), not a {asked.value} one. Leave out the "
            "kind to run it as it is."
        )
    n = default_studies(found) if n_studies is None else n_studies
    if loaded.dicom_dir is None:
        raise ProtocolError(
            f"{protocol}: a demo protocol names the folder its cohort is generated in: set data.dicom_dir."
        )
    cohort_dir = loaded.dicom_dir.parent
    if loaded.labels_path != cohort_dir / "labels.csv":
        raise ProtocolError(
            f"{protocol}: for the demo, data.labels must be labels.csv beside data.dicom_dir "
            f"({cohort_dir / 'labels.csv'})."
        )
    generated = ensure_cohort(cohort_dir, kind=found, n_studies=n, seed=seed, progress=progress)
    return PreparedDemo(Path(protocol), cohort_dir, found, n, generated)


def ensure_cohort(
    cohort_dir: Path, *, kind: DemoKind | str, n_studies: int, seed: int, progress: bool = False
) -> bool:
    """Generate the demo cohort in ``cohort_dir`` unless the same one (kind, size, seed, version) is there.

    A previous demo cohort (one with a stamp) is replaced; a folder holding anything else is refused.

    Returns
    -------
    bool
        True when the cohort was generated now.

    Raises
    ------
    OutputError
        If ``cohort_dir`` holds files without the stamp ``sitecal demo`` leaves.
    """
    kind = _kind(kind)
    cohort_dir = Path(cohort_dir)
    stamp = {"kind": kind.value, "n_studies": n_studies, "seed": seed, "sitecal": __version__}
    stamp_path = cohort_dir / _STAMP
    if stamp_path.is_file():
        try:
            if json.loads(stamp_path.read_text(encoding="utf-8")) == stamp:
                return False
        except (OSError, ValueError):
            pass
    if cohort_dir.exists() and any(cohort_dir.iterdir()):
        if not stamp_path.is_file():
            raise OutputError(
                f"{cohort_dir}: exists and was not made by 'sitecal demo'; refusing to overwrite it. "
                "Point the demo protocol's data paths at an empty folder."
            )
        stamp_path.unlink()
        for child in _GENERATED:
            target = cohort_dir / child
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
    cohort_dir.mkdir(parents=True, exist_ok=True)
    _SPECS[kind].generate(cohort_dir, n_studies=n_studies, seed=seed, progress=progress)
    write_text_atomic(stamp_path, json.dumps(stamp) + "\n")
    return True


def _kind(value: DemoKind | str) -> DemoKind:
    return DemoKind(
        check_option(value, name="kind", func="sitecal demo", options=[k.value for k in DemoKind])
    )


def _install_protocol(kind: DemoKind, home: Path) -> Path:
    """The copy of the packaged protocol of ``kind`` in ``home``, written if absent; never overwritten."""
    packaged = demo_protocol_path(kind)
    text = packaged.read_text(encoding="utf-8")
    target = home / packaged.name
    if target.is_file():
        if target.read_text(encoding="utf-8") == text:
            return target
        raise OutputError(
            f"{target}: differs from the demo protocol of this sitecal version (edited, or from another "
            f"version), and 'sitecal demo' does not overwrite it. Run your copy with 'sitecal demo "
            f"--protocol {target}', or delete it to get the packaged protocol back."
        )
    if target.exists():
        raise OutputError(f"{target}: exists and is not a file. Move it away, or run from another folder.")
    write_text_atomic(target, text)
    logger.info("Copied the %s demo protocol to %s", kind.value, target)
    return target
