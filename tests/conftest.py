from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests draw the same examples on every run (CI must not turn red on a new random draw); set
# HYPOTHESIS_PROFILE=explore to search with fresh random examples, and pin what it finds with @example.
settings.register_profile("sitecal", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "sitecal"))

REPO = Path(__file__).resolve().parents[1]
#: The demo protocols as packaged (sitecal.demo.demo_protocol_path); tests read or copy them, never run them.
DEMO_PROTOCOL = REPO / "src" / "sitecal" / "demo" / "protocols" / "demo.yaml"
#: one patient split into a fit half and an evaluation half (the demo cross-fits): for the tests that
#: check what each part holds
PATIENT_SPLIT = {"by": "patient", "fit_fraction": 0.5, "seed": 20261202}
CT_DEMO_PROTOCOL = DEMO_PROTOCOL.with_name("demo-ct.yaml")
# The exit code each verdict must give (README): too little data is no evidence either way, like a straddle.
VERDICT_EXIT = {"pass": 0, "fail": 1, "inconclusive": 3, "insufficient data": 3}


def assert_exit_is_the_verdicts(code: int, folder: Path) -> None:
    """A run reached its verdict, and its exit code is that verdict's (not an error's)."""
    verdict = json.loads((folder / "evaluation.json").read_text(encoding="utf-8"))["verdict"]
    assert code == VERDICT_EXIT[verdict], (code, verdict)


#: The site secret of the tests' demo runs (a real site's key is random and secret).
TEST_PSEUDONYM_KEY = "0123456789abcdef" * 4  # 64 hex digits, the form of a key sitecal creates


@pytest.fixture
def demo_protocol_text() -> str:
    return DEMO_PROTOCOL.read_text()


def write_demo_protocol(root: Path, manifest: object, *, n_resamples: int = 200, **sections: dict) -> Path:
    """A copy of the demo protocol pointed at a generated cohort, writing its run folders under ``root``.

    ``sections`` update protocol sections by name, e.g. ``calibration={"min_group_size": 30}``. The
    pseudonymisation key is a fixed test key, so the patient split (seeded over pseudonymised keys) and every
    number downstream are the same on every machine and every run.
    """
    import yaml

    protocol = yaml.safe_load(DEMO_PROTOCOL.read_text())
    protocol["data"]["dicom_dir"] = str(manifest.dicom_dir)  # type: ignore[attr-defined]
    protocol["data"]["labels"] = str(manifest.labels_csv)  # type: ignore[attr-defined]
    protocol["report"]["output_dir"] = str(root / "reports")
    protocol["evaluation"]["bootstrap"]["n_resamples"] = n_resamples
    key_file = root / "test-pseudonym-key"
    if not key_file.exists():
        key_file.write_text(TEST_PSEUDONYM_KEY + "\n")
        key_file.chmod(0o600)
    protocol["privacy"] = {"key_file": str(key_file)}
    for section, values in sections.items():
        protocol[section].update(values)
    path = root / "protocol.yaml"
    path.write_text(yaml.safe_dump(protocol, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One sealed run of the demo protocol on 160 studies (patient split: an `evaluation` part), 50
    resamples; shared by the tests that read a run folder (each spoils only a copy of it)."""
    from sitecal.cli import main
    from sitecal.demo import generate_demo

    root = tmp_path_factory.mktemp("small-run")
    manifest = generate_demo(root / "data", n_studies=160, seed=3)
    protocol = write_demo_protocol(
        root,
        manifest,
        n_resamples=50,
        inputs={"num_workers": 0},
        calibration={"min_group_size": 20, "split": PATIENT_SPLIT},
    )
    assert main(["run", str(protocol), "--no-progress", "--workers", "1"]) in (0, 1, 3)
    (folder,) = (root / "reports").glob("demo-*")
    return {"root": root, "folder": folder, "protocol": protocol, "manifest": manifest}


def without_data_uris(text: str) -> str:
    """``text`` of an HTML view with its embedded figures (``data:`` URIs, base64) left out.

    Base64 is text of 64 symbols, so a three-letter name turns up in a megabyte of it by chance, as in a
    PDF's compressed streams; a figure holds no text to search.
    """
    import re

    return re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]*", "data:image/png;base64,", text)
