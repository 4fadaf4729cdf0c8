"""``inputs.precision``, ``inputs.precision_tolerance`` and ``inputs.batch_size: auto`` in the protocol."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.conftest import DEMO_PROTOCOL

from sitecal.cli import main
from sitecal.errors import ProtocolError
from sitecal.protocol import load_protocol


def _protocol(tmp_path: Path, inputs: str) -> tuple[Path, int]:
    """The demo protocol with ``inputs`` in place of its batch size; the path and that line's number."""
    text = DEMO_PROTOCOL.read_text().replace("  batch_size: 64\n", inputs)
    path = tmp_path / "p.yaml"
    path.write_text(text)
    line = next(i for i, row in enumerate(text.splitlines(), 1) if row == inputs.splitlines()[-1])
    return path, line


def test_the_defaults_change_nothing() -> None:
    inputs = load_protocol(DEMO_PROTOCOL).protocol.inputs
    assert (inputs.batch_size, inputs.precision, inputs.precision_tolerance) == (64, "float32", 1e-3)


def test_auto_and_a_precision_are_read(tmp_path: Path) -> None:
    path, _ = _protocol(tmp_path, "  batch_size: auto\n  precision: bfloat16\n  precision_tolerance: 0.01\n")
    inputs = load_protocol(path).protocol.inputs
    assert (inputs.batch_size, inputs.precision, inputs.precision_tolerance) == ("auto", "bfloat16", 0.01)


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        (
            "  precision: fp16\n",
            "inputs.precision: Input should be 'float32', 'float16' or 'bfloat16'. Got 'fp16'",
        ),
        ("  precision_tolerance: 0\n", "inputs.precision_tolerance: Input should be greater than 0"),
        (
            "  precision_tolerance: 0.2\n",
            "inputs.precision_tolerance: Input should be less than or equal to 0.05",
        ),
        (
            "  batch_size: largest\n",
            "inputs.batch_size: must be a whole number of studies (e.g. 32), or 'auto' for the largest batch "
            "that fits the GPU. Got 'largest'",
        ),
        ("  batch_size: 0\n", "inputs.batch_size: must be at least 1 (or 'auto'). Got 0"),
        ("  batch_size: 12.5\n", "inputs.batch_size: must be a whole number of studies (e.g. 32)"),
    ],
)
def test_bad_values_are_refused_at_their_line(tmp_path: Path, inputs: str, message: str) -> None:
    path, line = _protocol(tmp_path, inputs)
    with pytest.raises(ProtocolError) as info:
        load_protocol(path)
    assert f"{path}:{line}: {message}" in str(info.value)


def test_a_whole_float_batch_is_a_batch(tmp_path: Path) -> None:
    path, _ = _protocol(tmp_path, "  batch_size: 16.0\n")
    assert load_protocol(path).protocol.inputs.batch_size == 16


def test_check_refuses_a_bad_precision(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, line = _protocol(tmp_path, "  precision: half\n")
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert (
        f"{path}:{line}: inputs.precision: Input should be 'float32', 'float16' or 'bfloat16'. Got 'half'"
        in err
    )
    assert "Fix the protocol and run 'sitecal check' again." in err
