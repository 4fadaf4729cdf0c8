"""Transforms from a protocol are data, not code: a catalogue of injection attempts through inputs.transforms.

Each attempt is written into a copy of protocols/demo.yaml and loaded with ``load_protocol`` (what both
``sitecal check`` and ``sitecal run`` do first), and also handed to ``build_transforms`` directly as an
unvalidated ``TransformSettings.model_construct`` (defence in depth: the builder re-checks). Where an
attempt would run a command, the command creates a marker file, and the marker must never appear.
"""

from __future__ import annotations

import inspect
import shlex
import textwrap
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from tests.conftest import DEMO_PROTOCOL

from sitecal.errors import ProtocolError
from sitecal.inference import build_transforms, transform_fingerprint
from sitecal.protocol import TRANSFORM_ALLOWLIST, TransformSettings, load_protocol, transform_problem

FIX = "Fix the protocol and run 'sitecal check' again."
ALLOWED_NAMES = (
    "CenterSpatialCrop, ClipIntensityPercentiles, CropForeground, EnsureChannelFirst, Flip, "
    "NormalizeIntensity, Orientation, RepeatChannel, Resize, ResizeWithPadOrCrop, Rotate90, ScaleIntensity, "
    "ScaleIntensityRange, ScaleIntensityRangePercentiles, Spacing, SpatialPad, ThresholdIntensity, Transpose"
)
NOT_ALLOWED = (
    "is not a transform a protocol may name: sitecal reads the images itself and accepts these MONAI array "
    f"transforms: {ALLOWED_NAMES}."
)
NO_CODE = (
    "(arguments are plain numbers, booleans and fixed words: nothing that names code, a reader or a data "
    "type)."
)
RESIZE_ARGS = "Allowed: align_corners, anti_aliasing, anti_aliasing_sigma, mode, size_mode, spatial_size."
RESIZE_SIZE = (
    "Resize 'spatial_size' must be an integer from 1 to 512 (applied to every spatial axis), or a list of 1 "
    "to 3 items, each an integer from 1 to 4096 or -1 (-1: the image's own size on that axis), at most "
    "268435456 voxels in all."
)
MODES = "'nearest', 'nearest-exact', 'linear', 'bilinear', 'bicubic', 'trilinear', 'area'"


def _protocol(tmp_path: Path, transforms: str) -> Path:
    """protocols/demo.yaml with its ``inputs.transforms`` list replaced by ``transforms`` (YAML items)."""
    text = DEMO_PROTOCOL.read_text()
    start, end = text.index("  transforms:\n"), text.index("  batch_size:")
    block = textwrap.indent(textwrap.dedent(transforms).strip("\n") + "\n", "    ")
    path = tmp_path / "protocol.yaml"
    path.write_text(text[:start] + "  transforms:\n" + block + text[end:])
    return path


def _line_of(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


def _marker_command(marker: Path) -> str:
    return f"touch {shlex.quote(str(marker))}"


# (id, the entry as YAML, the same entry as (name, args), the field within the entry, the message, a text on
# the line the error must name). "{cmd}" is a shell command that would create the marker file.
CATALOGUE: list[tuple[str, str, tuple[Any, Any], str, str, str]] = [
    (
        "LoadImage-reader-os.system",
        "- name: LoadImage\n  args: {reader: os.system, command: '{cmd}'}",
        ("LoadImage", {"reader": "os.system", "command": "{cmd}"}),
        "name",
        f"'LoadImage' {NOT_ALLOWED}",
        "name: LoadImage",
    ),
    (
        "LoadImage-reader-dotted-path",
        "- name: LoadImage\n  args: {reader: subprocess.getoutput, image_only: true}",
        ("LoadImage", {"reader": "subprocess.getoutput", "image_only": True}),
        "name",
        f"'LoadImage' {NOT_ALLOWED}",
        "name: LoadImage",
    ),
    (
        "reader-on-an-allowed-transform",
        "- name: Resize\n  args:\n    spatial_size: [8, 8]\n    reader: os.system",
        ("Resize", {"spatial_size": [8, 8], "reader": "os.system"}),
        "args.reader",
        f"'reader' is not an argument a protocol may give Resize {NO_CODE} {RESIZE_ARGS}",
        "reader: os.system",
    ),
    (
        "Lambda-func",
        "- name: Lambda\n  args: {func: os.system}",
        ("Lambda", {"func": "os.system"}),
        "name",
        f"'Lambda' {NOT_ALLOWED}",
        "name: Lambda",
    ),
    (
        "RandLambda-func",
        "- name: RandLambda\n  args: {func: os.system, prob: 1.0}",
        ("RandLambda", {"func": "os.system", "prob": 1.0}),
        "name",
        f"'RandLambda' {NOT_ALLOWED}",
        "name: RandLambda",
    ),
    (
        "SaveImage",
        "- name: SaveImage\n  args: {output_dir: /tmp, writer: os.system}",
        ("SaveImage", {"output_dir": "/tmp", "writer": "os.system"}),
        "name",
        f"'SaveImage' {NOT_ALLOWED}",
        "name: SaveImage",
    ),
    (
        "CropForeground-select_fn",
        "- name: CropForeground\n  args:\n    select_fn: os.system",
        ("CropForeground", {"select_fn": "os.system"}),
        "args.select_fn",
        f"'select_fn' is not an argument a protocol may give CropForeground {NO_CODE} "
        "Allowed: allow_smaller, k_divisible, margin, mode, value.",
        "select_fn: os.system",
    ),
    (
        "dtype-numpy-string",
        "- name: Resize\n  args:\n    spatial_size: [8, 8]\n    dtype: numpy.float32",
        ("Resize", {"spatial_size": [8, 8], "dtype": "numpy.float32"}),
        "args.dtype",
        f"'dtype' is not an argument a protocol may give Resize {NO_CODE} {RESIZE_ARGS}",
        "dtype: numpy.float32",
    ),
    (
        "dtype-torch-string",
        "- name: ScaleIntensity\n  args:\n    dtype: torch.float32",
        ("ScaleIntensity", {"dtype": "torch.float32"}),
        "args.dtype",
        f"'dtype' is not an argument a protocol may give ScaleIntensity {NO_CODE} "
        "Allowed: channel_wise, factor, maxv, minv.",
        "dtype: torch.float32",
    ),
    (
        "_target_-in-args",
        "- name: NormalizeIntensity\n  args:\n    _target_: os.system\n    command: '{cmd}'",
        ("NormalizeIntensity", {"_target_": "os.system", "command": "{cmd}"}),
        "args._target_",
        f"'_target_' is not an argument a protocol may give NormalizeIntensity {NO_CODE} "
        "Allowed: channel_wise, divisor, nonzero, subtrahend.",
        "_target_: os.system",
    ),
    (
        "nested-dict-argument",
        "- name: Resize\n  args:\n    spatial_size: {_target_: os.system, command: '{cmd}'}",
        ("Resize", {"spatial_size": {"_target_": "os.system", "command": "{cmd}"}}),
        "args.spatial_size",
        f"{RESIZE_SIZE} Got a mapping.",
        "spatial_size: {_target_",
    ),
    (
        "list-holding-a-dict",
        "- name: Resize\n  args:\n    spatial_size: [8, {_target_: os.system}]",
        ("Resize", {"spatial_size": [8, {"_target_": "os.system"}]}),
        "args.spatial_size",
        f"{RESIZE_SIZE} Got a list holding a mapping.",
        "spatial_size: [8, {_target_",
    ),
    (
        "mode-names-a-function",
        "- name: Resize\n  args:\n    spatial_size: [8, 8]\n    mode: os.system",
        ("Resize", {"spatial_size": [8, 8], "mode": "os.system"}),
        "args.mode",
        f"Resize 'mode' must be one of {MODES}. Got 'os.system'.",
        "mode: os.system",
    ),
    (
        "unknown-argument-with-guess",
        "- name: NormalizeIntensity\n  args:\n    nonzeroo: true",
        ("NormalizeIntensity", {"nonzeroo": True}),
        "args.nonzeroo",
        f"'nonzeroo' is not an argument a protocol may give NormalizeIntensity {NO_CODE} "
        "Allowed: channel_wise, divisor, nonzero, subtrahend. Did you mean 'nonzero'?",
        "nonzeroo: true",
    ),
    (
        "mode-outside-vocabulary",
        "- name: Resize\n  args:\n    spatial_size: [8, 8]\n    mode: bilinearr",
        ("Resize", {"spatial_size": [8, 8], "mode": "bilinearr"}),
        "args.mode",
        f"Resize 'mode' must be one of {MODES}. Got 'bilinearr'. Did you mean 'bilinear'?",
        "mode: bilinearr",
    ),
    (
        "pad-mode-empty-leaks-memory",
        "- name: SpatialPad\n  args:\n    spatial_size: [8, 8]\n    mode: empty",
        ("SpatialPad", {"spatial_size": [8, 8], "mode": "empty"}),
        "args.mode",
        "SpatialPad 'mode' must be one of 'constant', 'edge', 'reflect', 'replicate', 'circular', "
        "'symmetric', 'wrap', 'linear_ramp', 'maximum', 'mean', 'median', 'minimum'. Got 'empty'.",
        "mode: empty",
    ),
    (
        "bool-for-an-int",
        "- name: RepeatChannel\n  args:\n    repeats: true",
        ("RepeatChannel", {"repeats": True}),
        "args.repeats",
        "RepeatChannel 'repeats' must be an integer from 1 to 16. Got True.",
        "repeats: true",
    ),
    (
        "bool-inside-a-size",
        "- name: Resize\n  args:\n    spatial_size: [true, 8]",
        ("Resize", {"spatial_size": [True, 8]}),
        "args.spatial_size",
        f"{RESIZE_SIZE} Got [True, 8].",
        "spatial_size: [true, 8]",
    ),
    (
        "huge-spatial-size",
        "- name: Resize\n  args:\n    spatial_size: [100000, 100000]",
        ("Resize", {"spatial_size": [100000, 100000]}),
        "args.spatial_size",
        f"{RESIZE_SIZE} Got [100000, 100000].",
        "spatial_size: [100000, 100000]",
    ),
    (
        "spatial-size-over-the-voxel-budget",
        "- name: SpatialPad\n  args:\n    spatial_size: [4096, 4096, 4096]",
        ("SpatialPad", {"spatial_size": [4096, 4096, 4096]}),
        "args.spatial_size",
        RESIZE_SIZE.replace("Resize", "SpatialPad") + " Got [4096, 4096, 4096].",
        "spatial_size: [4096, 4096, 4096]",
    ),
    (
        "not-a-number",
        "- name: ScaleIntensityRange\n  args: {a_min: .nan, a_max: 1.0}",
        ("ScaleIntensityRange", {"a_min": float("nan"), "a_max": 1.0}),
        "args.a_min",
        "ScaleIntensityRange 'a_min' must be a finite number. Got nan.",
        "a_min: .nan",
    ),
    (
        "required-argument-missing",
        "- name: Resize",
        ("Resize", {}),
        "args.spatial_size",
        "Resize needs 'spatial_size': " + RESIZE_SIZE.split(" must be ")[1] + " Add it under args.",
        "name: Resize",
    ),
    (
        "misspelt-transform-name",
        "- name: Resise\n  args: {spatial_size: [8, 8]}",
        ("Resise", {"spatial_size": [8, 8]}),
        "name",
        f"'Resise' {NOT_ALLOWED} Did you mean 'Resize'?",
        "name: Resise",
    ),
]


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    return tmp_path / "marker-the-command-ran"


def _fill(value: Any, command: str) -> Any:
    if isinstance(value, dict):
        return {k: _fill(v, command) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, command) for v in value]
    return value.replace("{cmd}", command) if isinstance(value, str) else value


@pytest.mark.timeout(20)
@pytest.mark.parametrize(
    ("entry", "field", "message", "needle"),
    [pytest.param(c[1], c[3], c[4], c[5], id=c[0]) for c in CATALOGUE],
)
def test_load_protocol_refuses_the_entry_at_its_field(
    tmp_path: Path, marker: Path, entry: str, field: str, message: str, needle: str
) -> None:
    path = _protocol(tmp_path, entry.replace("{cmd}", _marker_command(marker)))
    with pytest.raises(ProtocolError) as info:
        load_protocol(path)
    lines = str(info.value).splitlines()
    assert f"{path}:{_line_of(path, needle)}: inputs.transforms.0.{field}: {message}" in lines
    assert lines[-1] == FIX
    assert not marker.exists()


@pytest.mark.timeout(20)
@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [pytest.param(c[2], c[3], c[4], id=c[0]) for c in CATALOGUE],
)
def test_build_transforms_rechecks_unvalidated_entries(
    marker: Path, spec: tuple[Any, Any], field: str, message: str
) -> None:
    name, args = spec
    sneaked = TransformSettings.model_construct(name=name, args=_fill(args, _marker_command(marker)))
    fine = TransformSettings(name="EnsureChannelFirst", args={"channel_dim": "no_channel"})
    for load in (True, False):
        with pytest.raises(ProtocolError) as info:
            build_transforms([fine, sneaked], load=load)
        assert str(info.value) == f"inputs.transforms[1].{field}: {message}"
    assert not marker.exists()


@pytest.mark.timeout(20)
def test_the_schema_refuses_the_entry_built_in_python(marker: Path) -> None:
    with pytest.raises(ValueError, match=r"'LoadImage' is not a transform a protocol may name"):
        TransformSettings(name="LoadImage", args={"reader": "os.system", "command": _marker_command(marker)})
    assert not marker.exists()


@pytest.mark.timeout(20)
def test_the_reader_attack_is_real_against_bare_monai(marker: Path) -> None:
    # what the catalogue's first entry would do without the allowlist: MONAI looks "os.system" up by name
    # and calls it with the remaining arguments, so the command runs
    import monai.transforms as mt

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mt.LoadImage(reader="os.system", command=_marker_command(marker))
    assert marker.exists()


@pytest.mark.timeout(20)
def test_target_key_on_the_entry_is_an_unknown_field(tmp_path: Path, marker: Path) -> None:
    entry = f"- _target_: os.system\n  command: '{_marker_command(marker)}'\n  name: NormalizeIntensity"
    path = _protocol(tmp_path, entry)
    with pytest.raises(ProtocolError) as info:
        load_protocol(path)
    lines = str(info.value).splitlines()
    assert f"{path}:{_line_of(path, '_target_')}: inputs.transforms.0._target_: unknown field." in lines
    assert f"{path}:{_line_of(path, 'command:')}: inputs.transforms.0.command: unknown field." in lines
    assert not marker.exists()


@pytest.mark.timeout(20)
def test_python_tag_in_an_argument_is_not_constructed(tmp_path: Path, marker: Path) -> None:
    tagged = f"!!python/object/apply:os.system ['{_marker_command(marker)}']"
    entry = f"- name: Resize\n  args:\n    spatial_size: {tagged}"
    path = _protocol(tmp_path, entry)
    with pytest.raises(ProtocolError, match=r"invalid YAML: could not determine a constructor for the tag"):
        load_protocol(path)
    assert not marker.exists()


@pytest.mark.timeout(20)
def test_check_command_refuses_the_reader_attack(
    tmp_path: Path, marker: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sitecal.cli import main

    entry = f"- name: LoadImage\n  args: {{reader: os.system, command: '{_marker_command(marker)}'}}"
    path = _protocol(tmp_path, entry)
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert (
        f"{path}:{_line_of(path, 'name: LoadImage')}: inputs.transforms.0.name: 'LoadImage' {NOT_ALLOWED}"
        in err
    )
    assert not marker.exists()


@pytest.mark.timeout(20)
def test_padding_value_only_with_constant_mode(tmp_path: Path) -> None:
    path = _protocol(tmp_path, "- name: SpatialPad\n  args: {spatial_size: [8, 8], mode: edge, value: -1000}")
    with pytest.raises(ProtocolError) as info:
        load_protocol(path)
    line = _line_of(path, "name: SpatialPad") + 1
    assert (
        f"{path}:{line}: inputs.transforms.0.args.value: SpatialPad 'value' applies only with "
        "'mode: constant'. Remove 'value' or set 'mode: constant'."
    ) in str(info.value).splitlines()
    assert transform_problem("SpatialPad", {"spatial_size": [8, 8], "value": -1000}) is None  # default mode


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("protocol", "image", "shape"),
    [("demo.yaml", (40, 52), (1, 64, 64)), ("demo-ct.yaml", (5, 30, 20), (1, 16, 48, 48))],
)
def test_demo_protocols_load_and_their_chains_build_and_run(
    protocol: str, image: tuple[int, ...], shape: tuple[int, ...]
) -> None:
    loaded = load_protocol(DEMO_PROTOCOL.with_name(protocol))
    specs = loaded.protocol.inputs.transforms
    assert [s.name for s in specs][:2] == ["EnsureChannelFirst", "Resize"]
    chain = build_transforms(specs, load=False)
    out = chain(np.random.default_rng(0).normal(size=image).astype(np.float32))
    assert isinstance(out, torch.Tensor) and tuple(out.shape) == shape
    assert len(transform_fingerprint(specs)) == 64


@pytest.mark.timeout(20)
def test_demo_transform_constants_are_allowlisted() -> None:
    from sitecal.demo import DEMO_TRANSFORMS
    from sitecal.demo.ct import CT_TRANSFORMS

    for entry in (*DEMO_TRANSFORMS, *CT_TRANSFORMS):
        assert transform_problem(entry["name"], entry["args"]) is None


@pytest.mark.timeout(20)
def test_fingerprint_is_stable_and_follows_the_arguments() -> None:
    a = [TransformSettings(name="Resize", args={"spatial_size": [64, 64]})]
    b = [TransformSettings(name="Resize", args={"spatial_size": [64, 64]})]
    c = [TransformSettings(name="Resize", args={"spatial_size": [64, 65]})]
    assert transform_fingerprint(a) == transform_fingerprint(b) != transform_fingerprint(c)
    assert transform_fingerprint(a, "window") != transform_fingerprint(a)


# One valid example per allowlisted transform, with every argument it allows where they combine: each must
# pass the schema and construct in the installed MONAI.
EXAMPLES: dict[str, dict[str, Any]] = {
    "EnsureChannelFirst": {"channel_dim": "no_channel", "strict_check": True},
    "Resize": {
        "spatial_size": [32, -1],
        "size_mode": "all",
        "mode": "bilinear",
        "align_corners": False,
        "anti_aliasing": True,
        "anti_aliasing_sigma": [0.5, 0.5],
    },
    "ResizeWithPadOrCrop": {"spatial_size": [32, 32], "method": "end", "mode": "constant", "value": -1.0},
    "SpatialPad": {"spatial_size": 16, "method": "symmetric", "mode": "reflect"},
    "CenterSpatialCrop": {"roi_size": [8, 8]},
    "CropForeground": {"margin": 2, "k_divisible": [2, 2], "allow_smaller": True, "mode": "edge"},
    "ScaleIntensity": {"minv": 0.0, "maxv": 1.0, "factor": None, "channel_wise": True},
    "ScaleIntensityRange": {"a_min": -1000, "a_max": 400, "b_min": 0.0, "b_max": 1.0, "clip": True},
    "ScaleIntensityRangePercentiles": {
        "lower": 1,
        "upper": 99.5,
        "b_min": 0.0,
        "b_max": None,
        "clip": True,
        "relative": False,
        "channel_wise": False,
    },
    "NormalizeIntensity": {"subtrahend": [0.5], "divisor": 2.0, "nonzero": True, "channel_wise": True},
    "ThresholdIntensity": {"threshold": 0.5, "above": False, "cval": 0.0},
    "ClipIntensityPercentiles": {"lower": 5, "upper": None, "sharpness_factor": 10.0, "channel_wise": False},
    "Orientation": {"axcodes": "LPS", "as_closest_canonical": False},
    "Spacing": {
        "pixdim": [1.0, 1.0, 2.5],
        "diagonal": False,
        "mode": "bilinear",
        "padding_mode": "border",
        "align_corners": True,
        "scale_extent": False,
        "recompute_affine": False,
        "min_pixdim": 0.5,
        "max_pixdim": None,
    },
    "Flip": {"spatial_axis": [0, 1]},
    "Rotate90": {"k": 2, "spatial_axes": [0, 1]},
    "RepeatChannel": {"repeats": 3},
    "Transpose": {"indices": [0, 2, 1]},
}


@pytest.mark.timeout(30)
def test_every_allowlisted_transform_has_a_working_example() -> None:
    assert set(EXAMPLES) == set(TRANSFORM_ALLOWLIST)
    for name, args in EXAMPLES.items():
        assert set(TRANSFORM_ALLOWLIST[name]) - set(args) <= {"value"}  # shown once, on ResizeWithPadOrCrop
        specs = [TransformSettings(name=name, args=args)]
        chain = build_transforms(specs, load=False)
        assert type(chain.transforms[0]).__name__ == name


@pytest.mark.timeout(30)
def test_allowlist_matches_the_installed_monai() -> None:
    import monai.transforms as mt
    from monai.utils import GridSampleMode, GridSamplePadMode, InterpolateMode, NumpyPadMode, PytorchPadMode

    vocabularies = {
        "mode": {m.value for e in (InterpolateMode, GridSampleMode, NumpyPadMode, PytorchPadMode) for m in e},
        "padding_mode": {m.value for m in GridSamplePadMode},
        "method": {"symmetric", "end"},
        "size_mode": {"all", "longest"},
        "channel_dim": {"no_channel"},
    }
    for name, arguments in TRANSFORM_ALLOWLIST.items():
        params = inspect.signature(getattr(mt, name).__init__).parameters
        takes_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        for arg, spec in arguments.items():
            assert arg in params or (takes_kwargs and arg == "value"), f"{name}({arg})"
            if arg in params:
                assert spec.required == (params[arg].default is inspect.Parameter.empty), f"{name}({arg})"
            for form in spec.forms:
                words = set(getattr(form, "options", ()))
                assert words <= vocabularies.get(arg, set()) or not words, f"{name}({arg}): {words}"
        required = {p for p, v in params.items() if v.default is inspect.Parameter.empty and p != "self"}
        required -= {p for p, v in params.items() if v.kind in (v.VAR_KEYWORD, v.VAR_POSITIONAL)}
        assert required <= set(arguments), f"{name} requires {required - set(arguments)}"
