"""Model loading: every format gives the original module's logits; nothing from a model file is ever run.

Payloads write a marker file through ``os.system``; each refusal test proves the marker is absent, and the
``*_payloads_are_live`` controls prove the same crafted files do run their payload under plain torch, so a
refusal test cannot pass by a broken payload.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import re
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from pydantic import ValidationError
from safetensors.torch import save_file

from sitecal.demo.model import DemoNet, demo_weights_path, load_demo_model
from sitecal.errors import ModelError
from sitecal.inference import load_model
from sitecal.protocol import ModelSettings

DEMO = "sitecal.demo.model:DemoNet"


def settings(fmt: str, **fields: Any) -> ModelSettings:
    return ModelSettings(format=fmt, path="unused", class_names=["a", "b", "c"], **fields)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def demo() -> DemoNet:
    return load_demo_model()


@pytest.fixture(scope="module")
def images() -> torch.Tensor:
    return torch.randn(3, 1, 64, 64, generator=torch.Generator().manual_seed(0))


def assert_same_logits(module: torch.nn.Module, original: torch.nn.Module, x: torch.Tensor) -> None:
    with torch.no_grad():
        torch.testing.assert_close(module(x), original(x), rtol=0, atol=1e-6)


def export_demo(model: torch.nn.Module, path: Path) -> Path:
    batch = torch.export.Dim("batch", min=1, max=1024)
    program = torch.export.export(model, (torch.zeros(2, 1, 64, 64),), dynamic_shapes=({0: batch},))
    torch.export.save(program, path)
    return path


def save_torchscript(model: torch.nn.Module, path: Path) -> None:
    with warnings.catch_warnings():  # torch.jit is deprecated; sitecal still loads what sites have
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.script(model), str(path))


class _Payload:
    """Unpickling this runs a shell command (the classic malicious-checkpoint trick)."""

    def __init__(self, marker: Path) -> None:
        self.command = f"echo pwned > {marker}"

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[str]]:
        return (os.system, (self.command,))


def refused(path: Path, what: str) -> str:
    """The start of a refusal message: the file is named first."""
    return rf"^{re.escape(str(path))}: refused: .*{what}"


# -- every format loads the same network ---------------------------------------------------------------------


def test_safetensors_gives_the_original_logits(demo: DemoNet, images: torch.Tensor) -> None:
    loaded = load_model(settings("safetensors", architecture=DEMO), demo_weights_path())
    assert_same_logits(loaded.module, demo, images)
    assert not loaded.module.training
    assert (loaded.format, loaded.path) == ("safetensors", demo_weights_path())


@pytest.mark.parametrize("wrap", ["plain", "model", "state_dict"])
def test_state_dict_gives_the_original_logits(
    tmp_path: Path, demo: DemoNet, images: torch.Tensor, wrap: str
) -> None:
    state = demo.state_dict()
    torch.save(state if wrap == "plain" else {wrap: state, "epoch": 7}, tmp_path / "model.pt")
    loaded = load_model(settings("state_dict", architecture=DEMO), tmp_path / "model.pt")
    assert_same_logits(loaded.module, demo, images)


def test_torch_export_gives_the_original_logits_and_accepts_eval(
    tmp_path: Path, demo: DemoNet, images: torch.Tensor
) -> None:
    loaded = load_model(settings("torch_export"), export_demo(demo, tmp_path / "model.pt2"))
    assert_same_logits(loaded.module, demo, images)  # batch 3: the export's batch dimension is dynamic
    # ExportedProgram.module() raises on eval()/train(); predict_files calls both to restore the mode.
    loaded.module.train(True)
    loaded.module.eval()
    assert not loaded.module.training
    assert_same_logits(loaded.module, demo, images)


def test_torchscript_gives_the_original_logits_and_warns_it_is_a_program(
    tmp_path: Path, demo: DemoNet, images: torch.Tensor, caplog: pytest.LogCaptureFixture
) -> None:
    save_torchscript(demo, tmp_path / "model.ts")
    with caplog.at_level(logging.WARNING, logger="sitecal.inference.models"):
        loaded = load_model(settings("torchscript"), tmp_path / "model.ts")
    assert_same_logits(loaded.module, demo, images)
    assert "TorchScript is a program and runs as written" in caplog.text


@pytest.mark.parametrize("fmt", ["safetensors", "state_dict", "torch_export", "torchscript"])
def test_fingerprint_is_the_sha256_of_the_file(tmp_path: Path, demo: DemoNet, fmt: str) -> None:
    path = tmp_path / "model"
    if fmt == "safetensors":
        save_file(demo.state_dict(), str(path))
    elif fmt == "state_dict":
        torch.save(demo.state_dict(), path)
    elif fmt == "torch_export":
        path = export_demo(demo, tmp_path / "model.pt2")
    else:
        save_torchscript(demo, path)
    fields = {"architecture": DEMO} if fmt in ("safetensors", "state_dict") else {}
    loaded = load_model(settings(fmt, **fields), path)
    assert loaded.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


# -- pickled code in a .pt -----------------------------------------------------------------------------------


def test_a_pickle_that_runs_a_command_is_refused_and_not_run(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    torch.save({"weight": torch.zeros(1), "x": _Payload(marker)}, tmp_path / "evil.pt")
    with pytest.raises(ModelError, match=refused(tmp_path / "evil.pt", "would execute pickled code")) as err:
        load_model(settings("state_dict", architecture=DEMO), tmp_path / "evil.pt")
    assert "it names posix.system" in str(err.value) or "it names nt.system" in str(err.value)
    assert not marker.exists()


def test_the_pickle_payload_is_live(tmp_path: Path) -> None:
    """Control: the same file does run its command when loaded without weights_only."""
    marker = tmp_path / "pwned"
    torch.save({"x": _Payload(marker)}, tmp_path / "evil.pt")
    torch.load(tmp_path / "evil.pt", weights_only=False)
    assert marker.exists()


def test_a_whole_pickled_module_is_refused(tmp_path: Path, demo: DemoNet) -> None:
    torch.save(demo, tmp_path / "whole.pt")
    with pytest.raises(ModelError, match=refused(tmp_path / "whole.pt", "would execute pickled code")) as err:
        load_model(settings("state_dict", architecture=DEMO), tmp_path / "whole.pt")
    assert "it names sitecal.demo.model.DemoNet" in str(err.value)
    assert "Save the weights alone" in str(err.value)


def test_a_pickle_beyond_the_weights_only_reader_is_refused_without_overclaiming(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    (tmp_path / "raw.pt").write_bytes(pickle.dumps(_Payload(marker), protocol=5))
    with pytest.raises(ModelError, match=refused(tmp_path / "raw.pt", "cannot rule out pickled code")):
        load_model(settings("state_dict", architecture=DEMO), tmp_path / "raw.pt")
    assert not marker.exists()


def test_a_torchscript_archive_with_a_python_pickle_is_refused_by_torch(
    tmp_path: Path, demo: DemoNet
) -> None:
    """TorchScript's C++ unpickler resolves TorchScript types only: a pickled os.system fails to load."""
    marker = tmp_path / "pwned"
    save_torchscript(demo, tmp_path / "good.ts")
    rewrite_zip(tmp_path / "good.ts", tmp_path / "evil.ts", {"data.pkl": pickle.dumps(_Payload(marker), 2)})
    with pytest.raises(
        ModelError, match=rf"^{re.escape(str(tmp_path / 'evil.ts'))}: cannot load as TorchScript"
    ):
        load_model(settings("torchscript"), tmp_path / "evil.ts")
    assert not marker.exists()


# -- crafted .pt2 programs -----------------------------------------------------------------------------------


def rewrite_zip(src: Path, dst: Path, changes: dict[str, bytes | None]) -> None:
    """Copy a torch zip archive, replacing (or, for None, deleting) entries named relative to its folder."""
    with zipfile.ZipFile(src) as archive:
        entries = {info.filename: archive.read(info.filename) for info in archive.infolist()}
    prefix = next(iter(entries)).split("/", 1)[0] + "/"
    for name, data in changes.items():
        if data is None:
            entries.pop(prefix + name)
        else:
            entries[prefix + name] = data
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)


def _read_json(archive: Path, name: str) -> Any:
    with zipfile.ZipFile(archive) as zf:
        prefix = zf.namelist()[0].split("/", 1)[0] + "/"
        return json.loads(zf.read(prefix + name))


def _pickled_weight(good: Path, marker: Path) -> dict[str, bytes | None]:
    config = _read_json(good, "data/weights/model_weights_config.json")
    first = next(iter(config["config"].values()))
    first["use_pickle"] = True
    return {
        "data/weights/model_weights_config.json": json.dumps(config).encode(),
        f"data/weights/{first['path_name']}": pickle.dumps(_Payload(marker), protocol=2),
    }


def _opaque_constant(good: Path, marker: Path) -> dict[str, bytes | None]:
    config = _read_json(good, "data/constants/model_constants_config.json")
    config["config"]["evil"] = {
        "path_name": "opaque_obj_0",
        "is_param": False,
        "use_pickle": True,
        "tensor_meta": None,
    }
    return {
        "data/constants/model_constants_config.json": json.dumps(config).encode(),
        "data/constants/opaque_obj_0": pickle.dumps(_Payload(marker), protocol=2),
    }


def _sample_inputs(good: Path, marker: Path) -> dict[str, bytes | None]:
    return {"data/sample_inputs/model.pt": pickle.dumps(_Payload(marker), protocol=2)}


def _shape_expression(good: Path, marker: Path) -> dict[str, bytes | None]:
    program = _read_json(good, "models/model.json")
    values = program["graph_module"]["graph"]["tensor_values"]
    expr = f"__import__('os').system('echo pwned > {marker}')"
    values[next(iter(values))]["sizes"][0] = {"as_expr": {"expr_str": expr, "hint": {"as_int": 2}}}
    return {"models/model.json": json.dumps(program).encode()}


def _guard_code(good: Path, marker: Path) -> dict[str, bytes | None]:
    program = _read_json(good, "models/model.json")
    program["guards_code"] = [f"__import__('os').system('echo pwned > {marker}') == 0"]
    return {"models/model.json": json.dumps(program).encode()}


def _aotinductor(good: Path, marker: Path) -> dict[str, bytes | None]:
    return {"data/aotinductor/model/model.so": b"\x7fELF native code"}


def _legacy_weights(good: Path, marker: Path) -> dict[str, bytes | None]:
    return {"data/weights/model.pt": pickle.dumps(_Payload(marker), protocol=2)}


LIVE = {  # torch 2.13 runs each of these payloads in torch.export.load, .module() or the forward
    "pickled weight": (_pickled_weight, "is a pickle \\(use_pickle\\)"),
    "opaque constant": (_opaque_constant, "holds pickled objects \\(data/constants/opaque_obj_0\\)"),
    "sample inputs": (_sample_inputs, "its sample inputs .* are not plain tensors"),
    "shape expression": (_shape_expression, "the shape expression .* is not arithmetic"),
}
REFUSED_BY_LAYOUT = {
    "AOTInductor library": (_aotinductor, "AOTInductor native code"),
    "legacy pickled weights": (_legacy_weights, "old layout whose weights are pickles"),
}


@pytest.fixture(scope="module")
def good_pt2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_demo(load_demo_model(), tmp_path_factory.mktemp("pt2") / "good.pt2")


@pytest.mark.parametrize("case", [*LIVE, *REFUSED_BY_LAYOUT])
def test_a_crafted_pt2_is_refused_and_not_run(tmp_path: Path, good_pt2: Path, case: str) -> None:
    craft, reason = {**LIVE, **REFUSED_BY_LAYOUT}[case]
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pt2"
    rewrite_zip(good_pt2, evil, craft(good_pt2, marker))
    with pytest.raises(ModelError, match=refused(evil, reason)) as err:
        load_model(settings("torch_export"), evil)
    assert "loading it would run code from the file" in str(err.value)
    assert not marker.exists()


@pytest.mark.parametrize("case", [*LIVE, "guard code"])
def test_the_crafted_pt2_payloads_are_live(tmp_path: Path, good_pt2: Path, case: str) -> None:
    """Control: plain torch runs every payload above; if one stops, its refusal test proves less."""
    craft = _guard_code if case == "guard code" else LIVE[case][0]
    marker = tmp_path / "pwned"
    rewrite_zip(good_pt2, tmp_path / "evil.pt2", craft(good_pt2, marker))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.export.load(tmp_path / "evil.pt2").module()(torch.zeros(2, 1, 64, 64))
        except Exception:  # the payload runs before the crafted file breaks the load
            pass
    assert marker.exists()


def test_pt2_guard_code_is_never_run(
    tmp_path: Path, good_pt2: Path, demo: DemoNet, images: torch.Tensor
) -> None:
    marker = tmp_path / "pwned"
    rewrite_zip(good_pt2, tmp_path / "guarded.pt2", _guard_code(good_pt2, marker))
    loaded = load_model(settings("torch_export"), tmp_path / "guarded.pt2")
    assert_same_logits(loaded.module, demo, images)
    assert not marker.exists()


def _write_marker(path: str) -> int:
    Path(path).write_text("pwned")
    return 0


def test_a_pt2_graph_calling_python_is_refused_before_it_runs(
    tmp_path: Path, good_pt2: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch 2.13's verifier refuses such a node on its own; this pins sitecal's check behind it."""
    marker = tmp_path / "pwned"
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.call_function(_write_marker, (str(marker),))
    graph.output(x)
    program = torch.fx.GraphModule(torch.nn.Module(), graph)

    class Loaded:
        def module(self, check_guards: bool = True) -> torch.nn.Module:
            return program

    monkeypatch.setattr(torch.export, "load", lambda f: Loaded())
    with pytest.raises(ModelError, match=refused(good_pt2, "its graph calls .*_write_marker, which is not")):
        load_model(settings("torch_export"), good_pt2)
    assert not marker.exists()


def test_a_program_exported_in_training_mode_is_refused(tmp_path: Path) -> None:
    model = DemoNet().train()
    torch.export.save(torch.export.export(model, (torch.zeros(2, 1, 64, 64),)), tmp_path / "train.pt2")
    with pytest.raises(ModelError, match=refused(tmp_path / "train.pt2", "exported in training mode")):
        load_model(settings("torch_export"), tmp_path / "train.pt2")


def test_a_pt2_without_its_program_is_not_a_pt2(tmp_path: Path, good_pt2: Path) -> None:
    rewrite_zip(good_pt2, tmp_path / "partial.pt2", {"models/model.json": None})
    with pytest.raises(ModelError, match=r"partial\.pt2: no models/model\.json: not a program written by"):
        load_model(settings("torch_export"), tmp_path / "partial.pt2")


# -- wrong files, wrong settings -----------------------------------------------------------------------------


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(
        ModelError, match=r"nope\.pt: model file not found\. Check model\.path in the protocol\."
    ):
        load_model(settings("state_dict", architecture=DEMO), tmp_path / "nope.pt")


def test_a_folder_for_a_file_format(tmp_path: Path) -> None:
    with pytest.raises(
        ModelError, match=r"is a folder, but model\.format 'torchscript' reads a file\. For a MONAI"
    ):
        load_model(settings("torchscript"), tmp_path)


def test_an_architecture_that_cannot_be_imported() -> None:
    with pytest.raises(
        ModelError, match=r"^model\.architecture: cannot import 'sitecal\.demo\.model:Nope'\."
    ):
        load_model(settings("safetensors", architecture="sitecal.demo.model:Nope"), demo_weights_path())


def test_an_architecture_that_is_not_a_module_is_never_called() -> None:
    with pytest.raises(ModelError, match=r"^model\.architecture: 'os:system' names a module of Python's"):
        load_model(
            settings("safetensors", architecture="os:system", architecture_args={"command": "true"}),
            demo_weights_path(),
        )
    with pytest.raises(
        ModelError, match=r"^model\.architecture: 'sitecal\.cli:main' is not a torch\.nn\.Module class\."
    ):
        load_model(
            settings("safetensors", architecture="sitecal.cli:main", architecture_args={"argv": ["run"]}),
            demo_weights_path(),
        )


def test_architecture_args_the_class_rejects() -> None:
    with pytest.raises(
        ModelError, match=r"^model\.architecture_args: sitecal\.demo\.model:DemoNet rejected them: "
    ):
        load_model(
            settings("safetensors", architecture=DEMO, architecture_args={"depth": 3}), demo_weights_path()
        )


def test_weights_that_do_not_fit_the_architecture() -> None:
    path = demo_weights_path()
    with pytest.raises(
        ModelError, match=rf"^{re.escape(str(path))}: weights do not fit {DEMO}: size mismatch for"
    ):
        load_model(settings("safetensors", architecture=DEMO, architecture_args={"width": 8}), path)


@pytest.mark.parametrize(
    ("fmt", "kind", "message"),
    [
        ("state_dict", "torchscript", "is a TorchScript archive, not weights: use model.format torchscript"),
        ("state_dict", "pt2", "cannot be read as weights saved with torch.save"),
        ("safetensors", "state_dict", "not a safetensors file"),
        ("torch_export", "state_dict", "not a .pt2 program written by torch.export.save"),
        ("torch_export", "junk", "not a .pt2 program \\(not a zip archive\\)"),
        ("torchscript", "safetensors", "cannot load as TorchScript"),
        ("state_dict", "list", "expected a state dict \\(name -> tensor\\), found list"),
    ],
)
def test_a_file_of_another_format(
    tmp_path: Path, demo: DemoNet, good_pt2: Path, fmt: str, kind: str, message: str
) -> None:
    path = tmp_path / "model.bin"
    if kind == "torchscript":
        save_torchscript(demo, path)
    elif kind == "pt2":
        path = good_pt2
    elif kind == "safetensors":
        save_file(demo.state_dict(), str(path))
    elif kind == "state_dict":
        torch.save(demo.state_dict(), path)
    elif kind == "list":
        torch.save([torch.zeros(1)], path)
    else:
        path.write_bytes(b"not a model")
    fields = {"architecture": DEMO} if fmt in ("safetensors", "state_dict") else {}
    with pytest.raises(ModelError, match=rf"^{re.escape(str(path))}: {message}"):
        load_model(settings(fmt, **fields), path)


# -- MONAI bundles -------------------------------------------------------------------------------------------


NETWORK_DEF: dict[str, Any] = {
    "_target_": "DenseNet",  # a MONAI short name, found the way MONAI finds it
    "spatial_dims": 2,
    "in_channels": "%image::channels",  # a macro
    "out_channels": "@num_classes",  # a reference
    "init_features": 4,
    "growth_rate": 4,
    "block_config": [2, 2],
    "bn_size": 2,
}
BUNDLE_IMAGES = torch.randn(2, 1, 32, 32, generator=torch.Generator().manual_seed(1))


def tiny_densenet() -> torch.nn.Module:
    from monai.networks.nets import DenseNet

    torch.manual_seed(0)
    return DenseNet(
        spatial_dims=2,
        in_channels=1,
        out_channels=3,
        init_features=4,
        growth_rate=4,
        block_config=[2, 2],
        bn_size=2,
    ).eval()


def make_bundle(
    root: Path,
    network: torch.nn.Module,
    *,
    weights: tuple[str, ...] = ("safetensors",),
    config: dict[str, Any] | None = None,
    config_name: str | None = "inference.json",
) -> Path:
    folder = root / "bundle"
    (folder / "configs").mkdir(parents=True)
    (folder / "models").mkdir()
    (folder / "configs" / "metadata.json").write_text(json.dumps({"name": "tiny", "version": "0.1.0"}))
    if config is None:
        config = {
            "imports": ["$import os"],
            "device": "$torch.device('cpu')",
            "num_classes": 3,
            "image": {"channels": 1},
            "network_def": NETWORK_DEF,
            "network": "$@network_def.to(@device)",
        }
    if config_name is not None:
        text = json.dumps(config) if config_name.endswith(".json") else yaml.safe_dump(config)
        (folder / "configs" / config_name).write_text(text)
    for kind in weights:
        if kind == "safetensors":
            save_file(network.state_dict(), str(folder / "models" / "model.safetensors"))
        elif kind == "pt":
            torch.save({"model": network.state_dict()}, folder / "models" / "model.pt")
        else:
            save_torchscript(network, folder / "models" / "model.ts")
    return folder


def bundle_settings() -> ModelSettings:
    return settings("monai_bundle")


@pytest.mark.parametrize(
    ("weights", "config_name"),
    [(("safetensors",), "inference.json"), (("pt",), "inference.yaml"), (("ts",), None)],
)
def test_a_bundle_gives_the_original_logits(
    tmp_path: Path, weights: tuple[str, ...], config_name: str | None
) -> None:
    network = tiny_densenet()
    folder = make_bundle(tmp_path, network, weights=weights, config_name=config_name)
    loaded = load_model(bundle_settings(), folder)
    assert_same_logits(loaded.module, network, BUNDLE_IMAGES)
    assert (loaded.format, loaded.path) == ("monai_bundle", folder)


def test_a_bundle_prefers_safetensors_and_fingerprints_the_files_used(tmp_path: Path) -> None:
    network = tiny_densenet()
    folder = make_bundle(tmp_path, network, weights=("safetensors", "ts"))
    torch.save({"model": tiny_densenet().state_dict()}, folder / "models" / "model.pt")  # unused
    loaded = load_model(bundle_settings(), folder)
    assert_same_logits(loaded.module, network, BUNDLE_IMAGES)
    used = ["configs/inference.json", "configs/metadata.json", "models/model.safetensors"]
    lines = "".join(f"{rel} {hashlib.sha256((folder / rel).read_bytes()).hexdigest()}\n" for rel in used)
    assert loaded.sha256 == hashlib.sha256(lines.encode()).hexdigest()


def test_a_bundle_of_torchscript_needs_no_inference_config(tmp_path: Path) -> None:
    folder = make_bundle(tmp_path, tiny_densenet(), weights=("ts",), config_name=None)
    loaded = load_model(bundle_settings(), folder)
    used = ["configs/metadata.json", "models/model.ts"]
    lines = "".join(f"{rel} {hashlib.sha256((folder / rel).read_bytes()).hexdigest()}\n" for rel in used)
    assert loaded.sha256 == hashlib.sha256(lines.encode()).hexdigest()


def test_expressions_the_network_does_not_use_are_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    config = {
        "imports": [f"$__import__('os').system('echo pwned > {marker}')"],
        "num_classes": 3,
        "image": {"channels": 1},
        "network_def": NETWORK_DEF,
        "network": "$@network_def.to(@device)",
    }
    load_model(bundle_settings(), make_bundle(tmp_path, tiny_densenet(), config=config))
    assert not marker.exists()


def _config_with(network_def: Any, **entries: Any) -> dict[str, Any]:
    return {"num_classes": 3, "image": {"channels": 1}, "network_def": network_def, **entries}


@pytest.mark.parametrize(
    ("config", "key"),
    [
        (_config_with({**NETWORK_DEF, "out_channels": "$3"}), "network_def::out_channels"),
        (_config_with(NETWORK_DEF, num_classes="$__import__('os').system('{marker}')"), "num_classes"),
        (_config_with(NETWORK_DEF, image={"channels": "$1"}), "image::channels"),
        (_config_with({**NETWORK_DEF, "block_config": [2, "$2"]}), "network_def::block_config::1"),
        (_config_with({**NETWORK_DEF, "_target_": "$monai.networks.nets.DenseNet"}), "network_def::_target_"),
        (_config_with("$monai.networks.nets.DenseNet(2, 1, 3)"), "network_def"),
        (_config_with({**NETWORK_DEF, "_requires_": "@setup"}, setup="$print(1)"), "setup"),
    ],
)
def test_a_dollar_expression_the_network_draws_on_is_refused(
    tmp_path: Path, config: dict[str, Any], key: str
) -> None:
    marker = tmp_path / "pwned"
    config = json.loads(json.dumps(config).replace("{marker}", f"echo pwned > {marker}"))
    folder = make_bundle(tmp_path, tiny_densenet(), config=config)
    path = folder / "configs" / "inference.json"
    expected = (
        rf"^{re.escape(str(path))}: key '{re.escape(key)}' is a Python expression .*: refused, sitecal never"
    )
    with pytest.raises(ModelError, match=expected):
        load_model(bundle_settings(), folder)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("network_def", "key", "what"),
    [
        (
            {**NETWORK_DEF, "in_channels": "%other.json#channels"},
            "network_def::in_channels",
            "is a macro reading another file",
        ),
        (
            {"_target_": "os.system", "command": "echo pwned > {marker}"},
            "network_def::_target_",
            "names 'os.system', which is not a torch.nn.Module class",
        ),
        ({**NETWORK_DEF, "_mode_": "callable"}, "network_def::_mode_", "is 'callable'"),
        ({**NETWORK_DEF, "_debug_": True}, "network_def::_debug_", "would start the debugger"),
        ({**NETWORK_DEF, "_target_": "@num_classes"}, "network_def::_target_", "is '@num_classes'"),
        ({**NETWORK_DEF, "out_channels": "@"}, "network_def::out_channels", "refers to the whole config"),
    ],
)
def test_what_would_run_code_in_network_def_is_refused(
    tmp_path: Path, network_def: Any, key: str, what: str
) -> None:
    marker = tmp_path / "pwned"
    network_def = json.loads(json.dumps(network_def).replace("{marker}", str(marker)))
    folder = make_bundle(tmp_path, tiny_densenet(), config=_config_with(network_def))
    path = folder / "configs" / "inference.json"
    with pytest.raises(
        ModelError, match=rf"^{re.escape(str(path))}: key '{re.escape(key)}' {re.escape(what)}"
    ):
        load_model(bundle_settings(), folder)
    assert not marker.exists()


def test_a_network_class_from_the_bundles_own_code_is_not_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "pwned"
    folder = make_bundle(tmp_path, tiny_densenet(), config=_config_with({"_target_": "scripts.net.Net"}))
    (folder / "scripts").mkdir()
    (folder / "scripts" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('pwned')\n")
    (folder / "scripts" / "net.py").write_text("import torch\nclass Net(torch.nn.Module):\n    pass\n")
    monkeypatch.syspath_prepend(str(folder))  # as if sitecal ran inside the bundle folder
    with pytest.raises(
        ModelError,
        match=r"key 'network_def::_target_' names 'scripts\.net\.Net', which would be imported from",
    ):
        load_model(bundle_settings(), folder)
    assert not marker.exists()


def test_pickled_code_in_a_bundle_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    folder = make_bundle(tmp_path, tiny_densenet(), weights=())
    torch.save({"model": _Payload(marker)}, folder / "models" / "model.pt")
    with pytest.raises(
        ModelError, match=refused(folder / "models" / "model.pt", "would execute pickled code")
    ):
        load_model(bundle_settings(), folder)
    assert not marker.exists()


def test_bundle_weights_that_do_not_fit_network_def(tmp_path: Path) -> None:
    config = _config_with({**NETWORK_DEF, "growth_rate": 8})
    folder = make_bundle(tmp_path, tiny_densenet(), config=config)
    weights = folder / "models" / "model.safetensors"
    expected = (
        rf"^{re.escape(str(weights))}: weights do not fit the network_def of inference\.json \(DenseNet\): "
    )
    with pytest.raises(ModelError, match=expected):
        load_model(bundle_settings(), folder)


def test_a_network_def_the_class_rejects(tmp_path: Path) -> None:
    folder = make_bundle(tmp_path, tiny_densenet(), config=_config_with({**NETWORK_DEF, "depth": 3}))
    path = folder / "configs" / "inference.json"
    with pytest.raises(
        ModelError, match=rf"^{re.escape(str(path))}: network_def: cannot build the network: "
    ):
        load_model(bundle_settings(), folder)


def test_a_reference_to_an_undefined_entry(tmp_path: Path) -> None:
    folder = make_bundle(
        tmp_path, tiny_densenet(), config={"network_def": NETWORK_DEF, "image": {"channels": 1}}
    )
    with pytest.raises(
        ModelError, match=r"'network_def::out_channels' refers to 'num_classes', which the file does"
    ):
        load_model(bundle_settings(), folder)


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        ("no folder", r"bundle: bundle folder not found\. Check model\.path"),
        ("a file", r"bundle: model\.format is monai_bundle, so model\.path must be the bundle folder"),
        ("no configs", r"bundle: no configs/ folder, so this is not a MONAI bundle"),
        ("no metadata", r"metadata\.json: not found; every MONAI bundle has one"),
        (
            "no weights",
            r"bundle: no weights: expected models/model\.safetensors, models/model\.pt or models/model\.ts",
        ),
        (
            "no inference config",
            r"configs: no inference\.json or inference\.yaml, which model\.safetensors needs",
        ),
        ("two inference configs", r"configs: both inference\.json, inference\.yaml exist; keep the one"),
        ("no network_def", r"inference\.json: no 'network_def' entry"),
    ],
)
def test_a_broken_bundle_says_what_is_missing(tmp_path: Path, breakage: str, message: str) -> None:
    folder = make_bundle(tmp_path, tiny_densenet())
    configs = folder / "configs"
    if breakage == "no folder":
        folder = tmp_path / "elsewhere" / "bundle"
    elif breakage == "a file":
        folder = folder / "models" / "model.safetensors"
        message = r"model\.safetensors: model\.format is monai_bundle"
    elif breakage == "no configs":
        for item in configs.iterdir():
            item.unlink()
        configs.rmdir()
    elif breakage == "no metadata":
        (configs / "metadata.json").unlink()
    elif breakage == "no weights":
        (folder / "models" / "model.safetensors").unlink()
    elif breakage == "no inference config":
        (configs / "inference.json").unlink()
    elif breakage == "two inference configs":
        (configs / "inference.yaml").write_text("network_def: {}\n")
    else:
        (configs / "inference.json").write_text(json.dumps({"net": NETWORK_DEF}))
    with pytest.raises(ModelError, match=message):
        load_model(bundle_settings(), folder)


def test_monai_bundle_takes_no_architecture() -> None:
    assert settings("monai_bundle").architecture is None
    with pytest.raises(
        ValidationError, match="format 'monai_bundle' builds the network from the bundle's network_def"
    ):
        settings("monai_bundle", architecture=DEMO)
