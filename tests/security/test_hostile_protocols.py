"""Hostile protocol files and MONAI bundle configs: bombs, depth, size, absurd numbers, and what already held.

Every attack ends in a ProtocolError (protocol) or a ModelError (bundle) naming the file, the line where
there is one, and the limit; none runs code, hangs (each test runs under a timeout), or lets a
RecursionError or MemoryError escape (``pytest.raises`` lets any other exception fail the test).
"""

from __future__ import annotations

import json
import os
import re
import sys
import traceback
from pathlib import Path

import pytest
from tests.conftest import DEMO_PROTOCOL

from sitecal.errors import ModelError, ProtocolError
from sitecal.inference import load_model
from sitecal.protocol import ModelSettings, _load, load_protocol
from sitecal.protocol._load import yaml_excess

FIX = "Fix the protocol and run 'sitecal check' again."


def _write(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "p.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def _refusal(path: Path) -> str:
    with pytest.raises(ProtocolError) as info:
        load_protocol(path)
    return str(info.value)


def _laughs(levels: int = 9, fan_out: int = 10) -> str:
    """The "billion laughs" YAML: each anchor is a list of ``fan_out`` aliases of the one before.

    With 9 levels of 10 it is about 1.3 KB and expands to 10**9 leaves (plus the lists), which
    ``yaml.safe_load`` builds in no time as shared lists, but any walk that follows aliases visits them all.
    """
    lines = ['l0: &l0 "lol"']
    for level in range(1, levels + 1):
        items = ", ".join([f"*l{level - 1}"] * fan_out)
        lines.append(f"l{level}: &l{level} [{items}]")
    return "\n".join(lines) + "\n"


# -- resource limits on the YAML itself ----------------------------------------------------------------------


@pytest.mark.timeout(5)
def test_a_billion_laughs_protocol_is_refused_at_once(tmp_path: Path) -> None:
    text = _laughs()
    assert len(text.encode()) < 1800
    path = _write(tmp_path, text)
    # expanded sizes: l0 1, l1 11, l2 111, l3 1111, l4 11111, l5 111111: the count (keys and the top-level
    # mapping included) passes 100000 at the alias on line 6, the first line of l5
    assert (
        _refusal(path) == f"{path}:6: the protocol uses YAML aliases that expand to more than 100000 nodes."
    )


@pytest.mark.timeout(5)
def test_the_alias_count_is_memoised_not_expanded() -> None:
    # 30 levels of 10 would be 10**30 nodes: counted per anchor, the answer is immediate and exact
    excess = yaml_excess(_laughs(levels=30), max_nodes=10**40, max_depth=50)
    assert excess is None
    excess = yaml_excess(_laughs(levels=30), max_nodes=10**29, max_depth=50)
    assert excess == _load.YamlExcess(30, f"uses YAML aliases that expand to more than {10**29} nodes")


@pytest.mark.timeout(5)
def test_the_node_count_is_exact() -> None:
    # the mapping 1, key a 1, [1, 2] 3, key b 1, the outer list 1, two aliases of 3 each: 13 nodes
    text = "a: &x [1, 2]\nb: [*x, *x]\n"
    assert yaml_excess(text, max_nodes=13, max_depth=5) is None
    assert yaml_excess(text, max_nodes=12, max_depth=5) == _load.YamlExcess(
        2, "uses YAML aliases that expand to more than 12 nodes"
    )
    # without aliases the count is of what is written; empty lists count too
    assert yaml_excess("[" + "[], " * 200 + "]", max_nodes=100, max_depth=5) == _load.YamlExcess(
        1, "holds more than 100 nodes"
    )


@pytest.mark.timeout(5)
def test_a_few_aliases_are_still_accepted(tmp_path: Path) -> None:
    text = DEMO_PROTOCOL.read_text().replace("seed: 20261202", "seed: &seed 20261202")
    path = _write(tmp_path, text.replace("seed: 7", "seed: *seed"))
    assert load_protocol(path).protocol.evaluation.bootstrap.seed == 20261202


@pytest.mark.timeout(5)
def test_an_alias_inside_its_own_anchor_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "name: demo\nloop: &x [1, *x]\n")
    assert _refusal(path) == f"{path}:2: the protocol has an alias (*x) inside the node it names."


@pytest.mark.timeout(5)
@pytest.mark.parametrize("style", ["flow", "block"])
def test_deep_nesting_is_refused_not_a_recursion_error(tmp_path: Path, style: str) -> None:
    if style == "flow":
        text, line = "name: " + "[" * 20000 + "]" * 20000 + "\n", 1
    else:  # block mappings need indentation, so the depth shows on line 51 (the top-level mapping is 1)
        text = "".join("  " * i + f"k{i}:\n" for i in range(200)) + "  " * 200 + "leaf\n"
        line = 51
    path = _write(tmp_path, text)
    assert (
        _refusal(path)
        == f"{path}:{line}: the protocol is nested deeper than 50 levels of mappings and lists."
    )


@pytest.mark.timeout(5)
def test_the_depth_limit_is_exact() -> None:
    # the top-level mapping is level 1, so "a: " followed by 49 lists reaches level 50
    assert yaml_excess("a: " + "[" * 49 + "]" * 49, max_nodes=1000, max_depth=50) is None
    assert yaml_excess("a: " + "[" * 50 + "]" * 50, max_nodes=1000, max_depth=50) == _load.YamlExcess(
        1, "is nested deeper than 50 levels of mappings and lists"
    )


@pytest.mark.timeout(10)
def test_a_recursion_error_behind_the_depth_limit_is_still_a_protocol_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_load, "MAX_YAML_DEPTH", 10**6)  # take the first lock away: the composer recurses
    path = _write(tmp_path, "name: " + "[" * 300 + "]" * 300 + "\n")
    # a low recursion limit stands in for a deeper file (PyYAML's scanner is quadratic in flow depth)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(traceback.extract_stack()) + 100)
    try:
        message = _refusal(path)
    finally:
        sys.setrecursionlimit(limit)
    assert message == (
        f"{path}: the protocol is nested too deeply to read. A protocol needs fewer than ten levels; "
        "flatten it."
    )


@pytest.mark.timeout(5)
def test_a_10_mb_protocol_is_refused_unparsed(tmp_path: Path) -> None:
    path = _write(tmp_path, "name: demo\n# " + "x" * (10 * 1024 * 1024) + "\n")
    assert _refusal(path) == (
        f"{path}: the protocol is larger than 1048576 bytes (1 MiB); a protocol is a few kilobytes of YAML. "
        "Check that this is the protocol file."
    )


@pytest.mark.timeout(5)
def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "protocol.yaml"
    os.mkfifo(fifo)  # opening it for reading would wait for a writer forever
    assert _refusal(fifo) == f"{fifo}: not a regular file. Give the path of a protocol YAML file."


@pytest.mark.timeout(5)
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("9" * 5000, "Exceeds the limit (4300 digits) for integer string conversion: value has 5000 digits"),
        ("2024-13-45", "month must be in 1..12"),
    ],
)
def test_a_value_python_cannot_build_is_a_protocol_error(tmp_path: Path, value: str, expected: str) -> None:
    path = _write(tmp_path, f"name: {value}\n")
    assert (
        _refusal(path)
        == f"{path}: invalid YAML value: {expected}. Fix the value and run 'sitecal check' again."
    )


# -- upper bounds checked at validation ----------------------------------------------------------------------

_BOUNDS = {
    "n_bins": (
        "n_bins: 15",
        "evaluation.n_bins",
        "must be at most 1000: every group's reliability curve keeps every bin, and with more bins than "
        "studies most are empty; 10 to 20 is usual.",
        1000,
    ),
    "n_resamples": (
        "n_resamples: 1000",
        "evaluation.bootstrap.n_resamples",
        "must be at most 100000: every metric of every group is recomputed in each resample, and 10000 "
        "already fix a 95% interval's bounds; 1000 to 10000 is usual.",
        100_000,
    ),
    "batch_size": (
        "batch_size: 64",
        "inputs.batch_size",
        "must be at most 1024: a batch of images is held in memory whole (1024 images of 512 x 512 already "
        "take 1 GiB); 8 to 64 is usual.",
        1024,
    ),
    "num_workers": (
        "num_workers: 2",
        "inputs.num_workers",
        "must be at most 64: each worker is a separate process with its own memory, and more workers than "
        "cores only add memory; 2 to 8 is usual.",
        64,
    ),
    "calibration.min_group_size": (
        "min_group_size: 50",
        "calibration.min_group_size",
        "must be at most 100000: a minimum above any cohort's size gives no group its own temperature "
        "(every group falls back).",
        100_000,
    ),
    "evaluation.min_group_size": (
        "min_group_size: 30",
        "evaluation.min_group_size",
        "must be at most 100000: a minimum above any cohort's size leaves every group unjudged.",
        100_000,
    ),
}


@pytest.mark.timeout(10)
@pytest.mark.parametrize("name", list(_BOUNDS))
@pytest.mark.parametrize("value", [10**9, 10**40])
def test_a_huge_number_is_refused_at_validation(tmp_path: Path, name: str, value: int) -> None:
    setting, field, message, _ = _BOUNDS[name]
    key = setting.split(":")[0]
    text = DEMO_PROTOCOL.read_text().replace(setting, f"{key}: {value}")
    path = _write(tmp_path, text)
    line = _line_of(text, f"{key}: {value}")
    assert _refusal(path) == f"{path}:{line}: {field}: {message} Got {value}\n{FIX}"


@pytest.mark.timeout(10)
@pytest.mark.parametrize("name", list(_BOUNDS))
def test_each_bound_is_inclusive(tmp_path: Path, name: str) -> None:
    setting, field, _, bound = _BOUNDS[name]
    key = setting.split(":")[0]
    text = DEMO_PROTOCOL.read_text().replace(setting, f"{key}: {bound}")
    value: object = load_protocol(_write(tmp_path, text)).protocol
    for part in field.split("."):
        value = getattr(value, part)
    assert value == bound
    text = DEMO_PROTOCOL.read_text().replace(setting, f"{key}: {bound + 1}")
    assert f"{field}: must be at most {bound}:" in _refusal(_write(tmp_path, text))


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("setting", "field"),
    [("seed: 7", "evaluation.bootstrap.seed"), ("seed: 20261202", "calibration.split.seed")],
)
def test_a_negative_seed_is_refused_before_the_run(tmp_path: Path, setting: str, field: str) -> None:
    # numpy.random.default_rng(-1) raises: without this check the run would stop after inference
    text = DEMO_PROTOCOL.read_text().replace(setting, "seed: -1")
    path = _write(tmp_path, text)
    line = _line_of(text, "seed: -1")
    assert _refusal(path) == (
        f"{path}:{line}: {field}: must be an integer >= 0 (a seed of numpy's random generator). Got -1\n{FIX}"
    )


@pytest.mark.timeout(10)
@pytest.mark.parametrize("value", [".nan", ".inf"])
def test_a_non_finite_acceptance_bound_is_refused(tmp_path: Path, value: str) -> None:
    # a NaN threshold compares false with every estimate: the criterion would never pass, silently
    text = DEMO_PROTOCOL.read_text().replace("below: 0.10", f"below: {value}")
    path = _write(tmp_path, text)
    line = _line_of(text, f"below: {value}")
    assert _refusal(path) == f"{path}:{line}: acceptance.0.below: Input should be a finite number\n{FIX}"


@pytest.mark.timeout(10)
def test_bands_on_patient_sex_are_refused(tmp_path: Path) -> None:
    # every study would be 'unknown' (PatientSex is a code, not a number), with no word said
    old = "sex: {tag: PatientSex, label: Sex}"
    text = DEMO_PROTOCOL.read_text().replace(old, "sex: {tag: PatientSex, bands: [0, 1], label: Sex}")
    path = _write(tmp_path, text)
    line = _line_of(text, "tag: PatientSex, bands")
    assert _refusal(path).startswith(
        f"{path}:{line}: subgroups.sex: 'bands' groups numbers, and 'PatientSex' holds text (VR CS): every "
        "value would be 'unknown'."
    )


# -- what already held, kept held ----------------------------------------------------------------------------


@pytest.mark.timeout(5)
def test_a_python_tag_is_not_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    path = _write(tmp_path, f"name: !!python/object/apply:os.system ['touch {marker}']\n")
    assert _refusal(path) == (
        f"{path}:1: invalid YAML: could not determine a constructor for the tag "
        "'tag:yaml.org,2002:python/object/apply:os.system'. Fix the syntax and run 'sitecal check' again."
    )
    assert not marker.exists()


@pytest.mark.timeout(5)
def test_a_python_tag_behind_an_alias_is_not_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    text = f"x: &cmd !!python/object/apply:os.system ['touch {marker}']\nname: *cmd\n"
    assert _refusal(_write(tmp_path, text)).endswith(
        "could not determine a constructor for the tag 'tag:yaml.org,2002:python/object/apply:os.system'. "
        "Fix the syntax and run 'sitecal check' again."
    )
    assert not marker.exists()


@pytest.mark.timeout(5)
def test_duplicate_keys_are_refused_also_through_an_alias(tmp_path: Path) -> None:
    path = _write(tmp_path, "name: a\nintended_use: b\nname: c\n")
    assert (
        _refusal(path) == f"{path}:3: 'name' appears twice in the same mapping (first on line 1). Keep one."
    )
    path = _write(tmp_path, "x: &m\n  a: 1\n  a: 2\ny: *m\n")
    assert _refusal(path) == f"{path}:3: 'a' appears twice in the same mapping (first on line 2). Keep one."


@pytest.mark.timeout(5)
def test_a_protocol_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "name: caf\xe9\n".encode("latin-1"))
    assert _refusal(path) == f"{path}: the protocol is not UTF-8 text (byte 9). Save it as UTF-8."


@pytest.mark.timeout(5)
@pytest.mark.parametrize("text", ["", "# only a comment\n", "\n  \n"])
def test_an_empty_protocol_is_refused(tmp_path: Path, text: str) -> None:
    path = _write(tmp_path, text)
    assert _refusal(path) == (
        f"{path}: the protocol is empty. Start from a copy of sitecal-demo/demo.yaml "
        "('sitecal demo --generate-only' writes it)."
    )


# -- MONAI bundle configs ------------------------------------------------------------------------------------


def _bundle(tmp_path: Path, config_name: str, config: str, metadata: str | None = None) -> Path:
    """A bundle folder whose config is ``config``; the weights are never reached, so any bytes do."""
    folder = tmp_path / "bundle"
    (folder / "configs").mkdir(parents=True)
    (folder / "models").mkdir()
    (folder / "configs" / "metadata.json").write_text(metadata or json.dumps({"name": "hostile"}))
    (folder / "configs" / config_name).write_text(config)
    (folder / "models" / "model.safetensors").write_bytes(b"not reached")
    return folder


def _model_refusal(folder: Path) -> str:
    settings = ModelSettings(format="monai_bundle", path="unused", class_names=["a", "b"])
    with pytest.raises(ModelError) as info:
        load_model(settings, folder)
    return str(info.value)


@pytest.mark.timeout(5)
def test_a_billion_laughs_bundle_config_is_refused_at_once(tmp_path: Path) -> None:
    text = (
        _laughs()
        + "network_def: {_target_: DenseNet121, spatial_dims: 2, in_channels: 1, out_channels: *l9}\n"
    )
    folder = _bundle(tmp_path, "inference.yaml", text)
    config = folder / "configs" / "inference.yaml"
    assert _model_refusal(folder) == (
        f"{config}:6: the config uses YAML aliases that expand to more than 100000 nodes; a bundle config "
        "needs far fewer. Repair the bundle or ask its provider for one without them."
    )


@pytest.mark.timeout(5)
@pytest.mark.parametrize("name", ["inference.json", "metadata.json"])
def test_deeply_nested_bundle_json_is_refused_not_a_recursion_error(tmp_path: Path, name: str) -> None:
    deep = '{"network_def": {"_target_": "DenseNet121", "x": ' + "[" * 100_000 + "]" * 100_000 + "}}"
    if name == "metadata.json":
        folder = _bundle(tmp_path, "inference.json", json.dumps({"network_def": {}}), metadata=deep)
    else:
        folder = _bundle(tmp_path, name, deep)
    path = folder / "configs" / name
    assert _model_refusal(folder) == (
        f"{path}:1: the config is nested deeper than 100 levels of objects and lists; a bundle config needs "
        "fewer than ten. Repair the bundle or ask its provider for a flatter one."
    )


@pytest.mark.timeout(5)
def test_brackets_inside_json_strings_are_not_nesting(tmp_path: Path) -> None:
    # 200 brackets inside a string are text; the config gets past the depth check to the $ refusal
    config = {"network_def": {"_target_": "DenseNet121", "spatial_dims": "$" + "[" * 200 + '\\"{'}}
    folder = _bundle(tmp_path, "inference.json", json.dumps(config))
    path = folder / "configs" / "inference.json"
    assert _model_refusal(folder).startswith(
        f"{path}: key 'network_def::spatial_dims' is a Python expression"
    )


@pytest.mark.timeout(5)
def test_deeply_nested_bundle_yaml_is_refused(tmp_path: Path) -> None:
    folder = _bundle(tmp_path, "inference.yaml", "network_def: " + "[" * 20000 + "]" * 20000 + "\n")
    path = folder / "configs" / "inference.yaml"
    assert _model_refusal(folder) == (
        f"{path}:1: the config is nested deeper than 100 levels of mappings and lists; a bundle config "
        "needs far fewer. Repair the bundle or ask its provider for one without them."
    )


@pytest.mark.timeout(10)
def test_a_huge_bundle_config_is_refused_unread(tmp_path: Path) -> None:
    folder = _bundle(tmp_path, "inference.json", '{"network_def": {}, "pad": "' + "x" * (5 << 20) + '"}')
    path = folder / "configs" / "inference.json"
    assert _model_refusal(folder) == (
        f"{path}: larger than 4194304 bytes (4 MiB), the limit for a bundle's config files, which are "
        "kilobytes of text. Check that this is the bundle's config."
    )


@pytest.mark.timeout(5)
def test_an_expression_behind_a_yaml_alias_is_still_refused(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    text = (
        f"cmd: &cmd \"$__import__('os').system('touch {marker}')\"\n"
        "network_def: {_target_: DenseNet121, spatial_dims: 2, in_channels: 1, out_channels: *cmd}\n"
    )
    folder = _bundle(tmp_path, "inference.yaml", text)
    path = folder / "configs" / "inference.yaml"
    assert re.match(
        rf"^{re.escape(str(path))}: key 'network_def::out_channels' is a Python expression .*: refused, "
        "sitecal never runs code from a bundle",
        _model_refusal(folder),
    )
    assert not marker.exists()


@pytest.mark.timeout(5)
def test_yaml_python_tags_in_a_bundle_config_are_not_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    text = f"network_def: !!python/object/apply:os.system ['touch {marker}']\n"
    folder = _bundle(tmp_path, "inference.yaml", text)
    path = folder / "configs" / "inference.yaml"
    assert _model_refusal(folder).startswith(f"{path}: cannot parse: could not determine a constructor")
    assert not marker.exists()


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    "architecture", ["os:system", "antigravity:Thing", "subprocess:Popen", "__main__:Net"]
)
def test_an_architecture_in_the_standard_library_is_refused_before_any_import(architecture: str) -> None:
    import sys

    from sitecal.errors import ModelError
    from sitecal.inference.models import _instantiate
    from sitecal.protocol import ModelSettings

    settings = ModelSettings(
        format="safetensors", path="m.safetensors", architecture=architecture, class_names=["a", "b"]
    )
    was_imported = "antigravity" in sys.modules
    with pytest.raises(ModelError) as info:
        _instantiate(settings)
    assert str(info.value) == (
        f"model.architecture: '{architecture}' names a module of Python's standard library, which defines no "
        "network. Name the class of your model's package, 'package.module:ClassName'."
    )
    assert ("antigravity" in sys.modules) == was_imported


@pytest.mark.timeout(10)
def test_an_architecture_module_that_fails_on_import_is_a_model_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sitecal.errors import ModelError
    from sitecal.inference.models import _instantiate
    from sitecal.protocol import ModelSettings

    (tmp_path / "broken_net_pkg.py").write_text("raise RuntimeError('CUDA kernels missing')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    settings = ModelSettings(
        format="safetensors", path="m.safetensors", architecture="broken_net_pkg:Net", class_names=["a", "b"]
    )
    with pytest.raises(ModelError) as info:
        _instantiate(settings)
    assert str(info.value) == (
        "model.architecture: importing 'broken_net_pkg' failed (RuntimeError: CUDA kernels missing). Fix or "
        "reinstall the package that defines it."
    )
