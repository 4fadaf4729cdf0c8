"""The example protocols of ``protocols/`` pass ``sitecal check`` against generated data, as they are written.

Each test generates, in a temporary folder, the small data its protocol names (at the relative paths the
protocol gives, so the copy is byte for byte the example), copies the protocol beside it and runs
``sitecal check``. Only the placeholders a site must change are replaced: the PACS's address (a real
Orthanc on loopback, started for the PACS examples) and nothing else. The demo protocols are the
package's own, copied: a test keeps the two copies identical.
"""

from __future__ import annotations

import csv
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml
from tests.conftest import CT_DEMO_PROTOCOL, DEMO_PROTOCOL, REPO
from tests.pacs.orthanc import AE_TITLE, PASSWORD, USER, free_port, make_tls_files, running_orthanc, tls_proxy

from sitecal.cli import main
from sitecal.demo import generate_demo
from sitecal.demo.ct.generate import generate_ct_demo

EXAMPLES = REPO / "protocols"
#: Every example, by file name: a new one must join a test below (test_every_example_is_checked).
CHECKED = (
    "demo.yaml",
    "demo-ct.yaml",
    "vendor-predictions.yaml",
    "pacs-dicomweb.yaml",
    "pacs-dimse.yaml",
    "network-site.yaml",
    "notebook.yaml",
    "monitoring.yaml",  # checked in tests/monitor/test_monitor_command.py, against a sealed baseline
)
#: The AE title the PACS examples call as (data.source.calling_ae), which Orthanc is told to accept.
CALLING_AE = "SITECAL"


def _copy(name: str, folder: Path, placeholders: dict[str, str] | None = None) -> Path:
    """The example ``name`` copied into ``folder``, each placeholder (which must occur) replaced."""
    text = (EXAMPLES / name).read_text(encoding="utf-8")
    for placeholder, value in (placeholders or {}).items():
        assert placeholder in text, placeholder
        text = text.replace(placeholder, value)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def _check_passes(protocol: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``sitecal check`` exits 0 and says the protocol is valid and what it checked."""
    code = main(["check", str(protocol)])
    out, err = capsys.readouterr()
    name = yaml.safe_load(protocol.read_text(encoding="utf-8"))["name"]
    assert code == 0, err
    assert f"valid protocol '{name}'" in out and "output folder checked" in out, out


def _write_csv(path: Path, header: list[str], rows: list[list[object]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)


def _scores_table(n: int, class_names: list[str], *, seed: int) -> SimpleNamespace:
    """``n`` studies of 3 per patient: labels, logits, probabilities and a scanner and site for each."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, len(class_names)))
    probabilities = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    labels = rng.integers(len(class_names), size=n)
    return SimpleNamespace(
        logits=logits,
        probabilities=probabilities,
        label_index=labels,
        labels=[class_names[i] for i in labels],
        patients=[f"P{i // 3:04d}" for i in range(n)],
        scanners=[("Fluoro X1", "Lumen 500")[i % 2] for i in range(n)],
        sites=[("North General", "South Clinic")[i % 3 == 0] for i in range(n)],
    )


def test_the_demo_protocols_are_the_package_s() -> None:
    assert (EXAMPLES / "demo.yaml").read_bytes() == DEMO_PROTOCOL.read_bytes()
    assert (EXAMPLES / "demo-ct.yaml").read_bytes() == CT_DEMO_PROTOCOL.read_bytes()


def test_every_example_is_checked() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.yaml")) == sorted(CHECKED)
    readme = (EXAMPLES / "README.md").read_text(encoding="utf-8")
    assert all(f"`{name}`" in readme for name in CHECKED)


@pytest.mark.parametrize(("name", "cohort", "generate"), [
    ("demo.yaml", "radiographs", generate_demo),
    ("demo-ct.yaml", "ct", generate_ct_demo),
])  # fmt: skip
def test_a_demo_protocol_passes_check_on_its_generated_cohort(
    name: str,
    cohort: str,
    generate: Callable[..., object],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # as 'sitecal demo' lays it out: sitecal-demo/<protocol> and its cohort beside it; the protocol's
    # report.output_dir (../reports) is the working folder's
    folder = tmp_path / "sitecal-demo"
    generate(folder / cohort, n_studies=10, seed=1)
    protocol = _copy(name, folder)
    monkeypatch.chdir(tmp_path)
    _check_passes(protocol, capsys)


def test_the_vendor_predictions_example_passes_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    protocol = _copy("vendor-predictions.yaml", tmp_path)
    class_names = ["normal", "nodule", "effusion"]
    table = _scores_table(60, class_names, seed=3)
    accessions = [f"A{1000 + i}" for i in range(60)]
    _write_csv(
        tmp_path / "vendor-predictions.csv",
        ["accession", "mrn", "scanner", "hospital", *[f"prob:{c}" for c in class_names]],
        [
            [a, p, s, h, *[f"{v:.6f}" for v in probs]]
            for a, p, s, h, probs in zip(
                accessions, table.patients, table.scanners, table.sites, table.probabilities, strict=True
            )
        ],
    )
    _write_csv(
        tmp_path / "labels.csv",
        ["accession", "label"],
        [[a, y] for a, y in zip(accessions, table.labels, strict=True)],
    )
    _check_passes(protocol, capsys)


def test_the_notebook_example_passes_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    protocol = _copy("notebook.yaml", tmp_path)
    class_names = ["no", "yes"]
    table = _scores_table(60, class_names, seed=4)
    _write_csv(
        tmp_path / "notebook-predictions.csv",
        ["study", "patient", "label", "site", *[f"logit:{c}" for c in class_names]],
        [
            [f"S{i:04d}", p, y, s, *[repr(float(v)) for v in z]]
            for i, (p, y, s, z) in enumerate(
                zip(table.patients, table.labels, table.sites, table.logits, strict=True)
            )
        ],
    )
    _check_passes(protocol, capsys)


def test_the_notebook_example_is_the_protocol_evaluate_arrays_makes() -> None:
    # what its comments say: each section but data and report is what evaluate_arrays' defaults make,
    # given calibrate_by="site" and the example's criterion
    from sitecal import evaluate_arrays
    from sitecal.protocol import load_protocol

    protocol = load_protocol(EXAMPLES / "notebook.yaml").protocol
    table = _scores_table(60, ["no", "yes"], seed=4)
    made = evaluate_arrays(
        labels=table.label_index,
        class_names=["no", "yes"],
        logits=table.logits,
        patients=table.patients,
        studies=[f"S{i:04d}" for i in range(60)],
        groups={"site": table.sites},
        calibrate_by="site",
        acceptance=[c.model_dump(exclude_unset=True) for c in protocol.acceptance],
    ).protocol
    for section in ("name", "intended_use", "model", "subgroups", "calibration", "evaluation", "acceptance"):
        assert getattr(made, section) == getattr(protocol, section), section
    assert made.privacy == protocol.privacy
    assert made.data.key == protocol.data.key and made.data.label_column == protocol.data.label_column


def test_the_network_site_example_passes_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    protocol = _copy("network-site.yaml", tmp_path)
    generate_demo(tmp_path / "export", n_studies=10, seed=2)
    assert main(["network-key", str(tmp_path / "network.key")]) == 0  # the coordinator's, copied to the site
    capsys.readouterr()
    _check_passes(protocol, capsys)


@pytest.fixture(scope="module")
def orthanc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    """An empty Orthanc that lets ``CALLING_AE`` query, with an HTTPS front under a test authority."""
    root = tmp_path_factory.mktemp("orthanc")
    modalities = {CALLING_AE: [CALLING_AE, "127.0.0.1", free_port()]}
    tls = make_tls_files(root / "tls")
    with (
        running_orthanc(root / "orthanc", modalities=modalities) as server,
        tls_proxy(server.http_port, tls) as port,
    ):
        yield SimpleNamespace(server=server, https_port=port, ca=tls.ca)


def _pacs_site_files(folder: Path) -> None:
    """The labels a site gives beside a PACS protocol (from a generated cohort), and its worklist."""
    manifest = generate_demo(folder / "cohort", n_studies=10, seed=5)
    shutil.copyfile(manifest.labels_csv, folder / "labels.csv")
    _write_csv(folder / "worklist.csv", ["AccessionNumber"], [["ACC0001"], ["ACC0002"]])


def test_the_dicomweb_example_passes_check_against_a_pacs(
    orthanc: SimpleNamespace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"https://127.0.0.1:{orthanc.https_port}/dicom-web"
    protocol = _copy("pacs-dicomweb.yaml", tmp_path, {"https://pacs.example.org/dicom-web": url})
    _pacs_site_files(tmp_path)
    shutil.copyfile(orthanc.ca, tmp_path / "site-ca.pem")
    credentials = tmp_path / "pacs-credentials.yaml"
    credentials.write_text(yaml.safe_dump({"username": USER, "password": PASSWORD}), encoding="utf-8")
    credentials.chmod(0o600)
    _check_passes(protocol, capsys)


def test_the_dimse_example_passes_check_against_a_pacs(
    orthanc: SimpleNamespace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    peer = f"{{host: 127.0.0.1, port: {orthanc.server.dicom_port}, ae_title: {AE_TITLE}}}"
    protocol = _copy(
        "pacs-dimse.yaml", tmp_path, {"{host: pacs.example.org, port: 11112, ae_title: PACS}": peer}
    )
    _pacs_site_files(tmp_path)
    _check_passes(protocol, capsys)
