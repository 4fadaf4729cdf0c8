"""Everything ``sitecal run`` would refuse, checked before any long work; ``sitecal check`` is this alone.

A protocol that loads is only half the question: the files it names must be there and usable, the model
must load with the declared architecture and give one logit per class, the device must exist and the
output folder must be writable and inside the protocol's tree. Each problem is one line naming the
protocol field and the fix, so that a site sees all of them at once instead of one per run.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from sitecal._io import unwritable_folder
from sitecal._pseudonym import key_file_problem, network_key_problem
from sitecal.errors import SitecalError
from sitecal.protocol import LoadedProtocol

__all__ = ["Preflight", "check_device", "output_file_problem", "preflight"]

logger = logging.getLogger(__name__)

#: The synthetic input of the test forward pass: an image (rows, columns), or a volume (slices, rows, cols).
_TEST_IMAGE = (256, 256)
_TEST_VOLUME = (32, 128, 128)


@dataclass(frozen=True)
class Preflight:
    """The outcome of :func:`preflight`: problems refuse the run; notes are said and the run goes on."""

    problems: tuple[str, ...]
    notes: tuple[str, ...] = field(default=())


def preflight(
    loaded: LoadedProtocol, *, device: str = "cpu", allow_output_anywhere: bool = False
) -> Preflight:
    """Check what a run needs besides a valid protocol, without scanning the DICOM folder.

    Parameters
    ----------
    loaded : LoadedProtocol
        From :func:`sitecal.protocol.load_protocol`.
    device : str
        The torch device the run will use.
    allow_output_anywhere : bool
        Accept a ``report.output_dir`` (and logit cache) outside the protocol's folder and the working
        folder.

    Returns
    -------
    Preflight
        ``problems``: one line each, ``field: what is wrong. What to do.``; empty when the run can start.
    """
    problems: list[str] = []
    notes: list[str] = []
    device_problem = check_device(device)
    if device_problem:
        problems.append(f"--device: {device_problem}")
    source = None if loaded.parts else loaded.protocol.data.source
    if source is not None:  # the studies come from a PACS: can it be asked?
        from sitecal.pacs import source_problems

        problems += source_problems(source, loaded.resolve)
    destination = loaded.protocol.report.send_to
    if destination is not None and destination.after_run:  # the archive the report goes to: can it?
        from sitecal.pacs.send import destination_problems

        problems += destination_problems(destination, loaded.resolve)
    if loaded.protocol.report.mlflow is not None:  # the MLflow store the run is logged to: can it be?
        from sitecal.run._mlflow import mlflow_problems

        problems += mlflow_problems(loaded, allow_anywhere=allow_output_anywhere)
    dicom_dir = None if source is not None else loaded.dicom_dir
    if dicom_dir is not None and not dicom_dir.is_dir():
        problems.append(f"data.dicom_dir: folder not found: {dicom_dir}")
    elif dicom_dir is not None and _empty(dicom_dir):
        problems.append(f"data.dicom_dir: {dicom_dir} holds no files. Point it at the exported studies.")
    problems += _labels_problems(loaded)
    problems += _predictions_problems(loaded)
    problems += _mapping_problems(loaded)
    problems += _output_problems(loaded, allow_output_anywhere)
    if loaded.network:
        key_problem = network_key_problem(loaded.key_file)
        problems += [key_problem] if key_problem else []
    elif key_problem := key_file_problem(loaded.key_file):
        problems.append(f"privacy.key_file: {key_problem}")
    if loaded.protocol.monitoring is not None:  # sitecal monitor: the baseline, the dates, the history
        from sitecal.run.monitoring import monitoring_problems

        problems += monitoring_problems(loaded)
    if loaded.predictions_path is None:
        model_problems, model_notes = _model_problems(loaded)
        problems += model_problems
        notes += model_notes
    elif loaded.model_path is not None and not loaded.model_path.is_file():
        problems.append(
            f"model.path: file not found: {loaded.model_path} (with data.predictions the model is not run, "
            "but a model.path given is hashed into provenance). Fix it, or remove model.format and "
            "model.path."
        )
    return Preflight(problems=tuple(problems), notes=tuple(notes))


def _empty(folder: Path) -> bool:
    """Whether ``folder`` holds no entry besides hidden ones (the scan skips those), looking no deeper."""
    try:
        with os.scandir(folder) as entries:
            return not any(not entry.name.startswith(".") for entry in entries)
    except OSError:  # unreadable: the scan says so, with its reason
        return False


def check_device(device: str) -> str | None:
    """Why ``device`` cannot run the model here, or ``None``."""
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        return f"'{device}' is not a torch device. Use cpu, cuda, cuda:N or mps."
    if parsed.type == "cpu":
        return None
    if parsed.type == "cuda":
        if torch.version.cuda is None:
            return (
                f"'{device}': this PyTorch build has no CUDA support (a CPU build). Use --device cpu, or "
                "install a CUDA build of torch."
            )
        if not torch.cuda.is_available():
            return f"'{device}': no CUDA GPU is visible to this process. Use --device cpu."
        if parsed.index is not None and parsed.index >= torch.cuda.device_count():
            return (
                f"'{device}': there are {torch.cuda.device_count()} CUDA devices "
                f"(cuda:0 to cuda:{torch.cuda.device_count() - 1})."
            )
        return None
    if parsed.type == "mps":
        return None if torch.backends.mps.is_available() else f"'{device}': MPS is not available here."
    return f"'{device}': sitecal runs models on cpu, cuda or mps."


def _labels_problems(loaded: LoadedProtocol) -> list[str]:
    from sitecal.cohort import read_labels

    labels_path = loaded.labels_path
    if labels_path is None:  # the labels are a column of the predictions file: read with it
        return []
    if not labels_path.is_file():
        return [f"data.labels: file not found: {labels_path}"]
    data = loaded.protocol.data
    try:
        table = read_labels(
            labels_path,
            key_column=data.key_column or data.key,
            label_column=data.label_column,
            class_names=loaded.protocol.model.class_names,
        )
    except SitecalError as exc:
        return [f"data.labels: {exc}"]
    if not table.labels:
        return [
            f"data.labels: {labels_path}: none of its {table.n_rows} rows has a usable label "
            f"(labels must be one of {list(loaded.protocol.model.class_names)} or an index). Check "
            "data.label_column and model.class_names."
        ]
    return []


def _predictions_problems(loaded: LoadedProtocol) -> list[str]:
    """The predictions file read whole, as a run reads it; and whether its keys can be joined."""
    from sitecal.cohort import check_subgroup_columns, labels_from_predictions, read_predictions

    path = loaded.predictions_path
    if path is None:
        return []
    if loaded.parts:
        return _parts_problems(loaded)
    protocol = loaded.protocol
    data = protocol.data
    try:
        table = read_predictions(
            path,
            class_names=protocol.model.class_names,
            key_column=data.key_column or data.key,
            patient_column=data.patient_column,
            label_column=data.label_column if loaded.labels_path is None else None,
            columns=[s.column for s in protocol.subgroups.values() if s.column is not None],
            label_optional=protocol.monitoring is not None,  # after go-live labels come later
        )
        check_subgroup_columns(table, protocol.subgroups)  # the identifier policy, as a run applies it
    except SitecalError as exc:
        return [f"data.predictions: {exc}"]
    if table.pseudonymised and loaded.labels_path is None and loaded.dicom_dir is not None:
        return [
            f"data.predictions: {path} has sitecal's pseudonymised keys, which cannot be joined to labels "
            "in clear: give data.labels (joined to the DICOM studies on data.key)."
        ]
    if table.pseudonymised and loaded.labels_path is not None and loaded.dicom_dir is None:
        return [
            f"data.predictions: {path} has sitecal's pseudonymised keys, and data.labels has keys in "
            "clear: give data.dicom_dir too (the studies join both), or a label column in the file."
        ]
    monitored = protocol.monitoring is not None  # after go-live, labels come late: none yet is no problem
    if (
        loaded.labels_path is None
        and not monitored
        and not labels_from_predictions(table, protocol.model.class_names).labels
    ):
        return [
            f"data.predictions: {path}: none of its rows has a usable label in column '{data.label_column}' "
            f"(labels must be one of {list(protocol.model.class_names)} or an index). Check "
            "data.label_column, or give data.labels."
        ]
    return []


def _parts_problems(loaded: LoadedProtocol) -> list[str]:
    """A network's parts read whole, as the evaluation reads them (under the network key)."""
    from sitecal._pseudonym import Pseudonymizer
    from sitecal.cohort import part_facts, read_parts

    path = loaded.predictions_path
    assert path is not None
    if not loaded.network:
        return [
            f"data.predictions: {path} is a folder (of sites' predictions parts): set "
            "privacy.network_key_file to the network's key, under which the sites wrote them."
        ]
    try:
        pseudonymize = Pseudonymizer(loaded.pseudonym_key())
    except SitecalError:
        return []  # the key's own problem is reported with privacy.network_key_file
    protocol = loaded.protocol
    try:
        read_parts(
            path,
            facts=part_facts(protocol, pseudonymize.fingerprint, model_sha256=None),
            subgroups=protocol.subgroups,
            min_count_shown=protocol.privacy.min_count_shown,
            pseudonymize=pseudonymize,
        )
    except SitecalError as exc:
        return [f"data.predictions: {exc}"]
    return []


def _mapping_problems(loaded: LoadedProtocol) -> list[str]:
    from sitecal.cohort.mapping import read_mapping

    if loaded.parts:  # the sites mapped the values before they shipped them
        return []
    problems = []
    for name, subgroup in loaded.protocol.subgroups.items():
        if subgroup.mapping is not None:
            try:
                read_mapping(loaded.resolve(subgroup.mapping), field=f"subgroups.{name}.mapping")
            except SitecalError as exc:
                problems.append(f"subgroups.{name}.mapping: {exc}")
    return problems


def _output_problems(loaded: LoadedProtocol, allow_anywhere: bool) -> list[str]:
    problems = []
    places = [("report.output_dir", loaded.output_root)]
    if loaded.protocol.inputs.logit_cache and loaded.protocol.inputs.logit_cache_dir is not None:
        cache = loaded.logit_cache_dir
        assert cache is not None
        places.append(("inputs.logit_cache_dir", cache))
    for field_name, folder in places:
        if not allow_anywhere and not _inside_allowed(folder, loaded.path.parent):
            problems.append(
                f"{field_name}: {folder} is outside the protocol's folder ({loaded.path.parent}) and the "
                "working folder. Write the run below one of them, or pass --allow-output-anywhere."
            )
            continue
        problem = unwritable_folder(folder)
        if problem:
            problems.append(f"{field_name}: {problem}. Choose a folder this account may write to.")
    return problems


def output_file_problem(path: Path, loaded: LoadedProtocol, *, allow_anywhere: bool) -> str | None:
    """Why a file sitecal is asked to write (``sitecal predict --output``) cannot be written there."""
    if path.exists() and not path.is_file():
        return f"{path} exists and is not a file. Name a file to write."
    if not allow_anywhere and not _inside_allowed(path.parent, loaded.path.parent):
        return (
            f"{path} is outside the protocol's folder ({loaded.path.parent}) and the working folder. "
            "Write it below one of them, or pass --allow-output-anywhere."
        )
    problem = unwritable_folder(path.parent)
    return f"{problem}. Choose a folder this account may write to." if problem else None


def _inside_allowed(folder: Path, protocol_folder: Path) -> bool:
    target = folder.resolve()
    return any(target.is_relative_to(root.resolve()) for root in (protocol_folder, Path.cwd()))


def _model_problems(loaded: LoadedProtocol) -> tuple[list[str], list[str]]:
    """Load the model and run one forward pass on a synthetic input through the protocol's transforms."""
    from sitecal.inference import build_transforms, load_model

    settings = loaded.protocol.model
    model_path = loaded.model_path
    if model_path is None:  # the schema requires it without data.predictions
        return ["model.path: not given. Give model.format and model.path, or data.predictions."], []
    if not model_path.exists():
        return [f"model.path: file not found: {model_path}"], []
    try:
        transforms = build_transforms(loaded.protocol.inputs.transforms, load=False)
    except SitecalError as exc:
        return [str(exc)], []
    try:
        model = load_model(settings, model_path)
    except SitecalError as exc:
        return [f"model: {exc}"], []
    try:
        width = _test_forward(model.module, transforms, loaded.protocol.inputs.kind)
    except Exception as exc:  # the synthetic input may not suit every chain; the real data will tell
        from sitecal.inference import first_line

        note = (
            f"model: a test forward pass on a synthetic {_shape_text(loaded.protocol.inputs.kind)} input "
            f"did not run ({type(exc).__name__}: {first_line(exc)[:200]}); the class count is checked on "
            "the first batch instead."
        )
        return [], [note]
    n_classes = len(settings.class_names)
    if width != n_classes:
        return [
            f"model.class_names: the model gives {width} outputs per study but {n_classes} class names "
            f"are listed ({', '.join(settings.class_names)}). List one name per output, in order."
        ], []
    return [], []


def _shape_text(kind: str) -> str:
    shape = _TEST_VOLUME if kind == "volume" else _TEST_IMAGE
    return " × ".join(str(n) for n in shape)


def _test_forward(module: object, transforms: object, kind: str) -> int:
    """The output width of ``module`` on a synthetic image or volume passed through ``transforms``."""
    import numpy as np
    import torch
    from monai.data import MetaTensor

    shape = _TEST_VOLUME if kind == "volume" else _TEST_IMAGE
    # a smooth ramp: NormalizeIntensity and percentile scalings see a non-constant image
    values = np.linspace(0.0, 1.0, int(np.prod(shape)), dtype=np.float32).reshape(shape)
    image = MetaTensor(torch.from_numpy(values), affine=torch.eye(4))
    item = transforms(image)  # type: ignore[operator]
    batch = torch.as_tensor(item).unsqueeze(0).float()
    assert isinstance(module, torch.nn.Module)
    with torch.inference_mode():
        out = module(batch)
    if isinstance(out, (tuple, list)):
        out = out[0]
    out = torch.as_tensor(out)
    return int(out.reshape(out.shape[0], -1).shape[1])
