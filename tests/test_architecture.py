"""The layering of ../shared/STYLE.md, checked by parsing every module's imports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "sitecal"

LAYER = {
    "errors": 1,
    "_validation": 1,
    "_types": 1,
    "results": 1,
    "provenance": 1,
    "_pseudonym": 1,
    "_io": 1,
    "_dicomfile": 1,
    "_scrub": 1,
    "__init__": 1,
    "metrics": 2,
    "stats": 2,
    "calibration": 2,
    "protocol": 3,
    "cohort": 3,
    "inference": 3,
    "demo": 3,
    "evaluation": 4,
    "report": 4,
    "run": 5,
    "preflight": 5,
    "_run_folder": 5,
    "cli": 6,
}
NUMERIC_FORBIDDEN = {"pydicom", "monai", "reportlab", "yaml", "pydantic", "matplotlib", "tqdm"}
# Which sitecal parts each part may import, beyond the base layer (layer 1).
ALLOWED = {
    "metrics": set(),
    "stats": {"metrics", "calibration"},  # the refit bootstrap resamples the whole temperature fit
    "calibration": {"metrics"},
    "protocol": set(),
    "cohort": {"protocol"},
    "inference": {"protocol", "calibration"},  # the deployable wrapper applies fitted temperatures
    "demo": {"inference", "metrics", "calibration", "protocol"},  # the CT demo builds its transform specs
    "evaluation": {"protocol", "metrics", "stats", "calibration"},
    "report": set(),
    "run": {
        "_run_folder",
        "protocol",
        "cohort",
        "inference",
        "evaluation",
        "report",
        "metrics",
        "stats",
        "calibration",
    },
    "preflight": {"protocol", "cohort", "inference"},  # labels, mappings and the model, before the scan
    "_run_folder": {"cohort"},  # the run folder's tables list the cohort's exclusions
    "cli": {"run", "preflight", "protocol", "cohort", "inference", "demo"},
}


def _part(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0].removesuffix(".py")


def _imports(path: Path) -> set[str]:
    """Absolute names of every module ``path`` imports (relative imports resolved)."""
    tree = ast.parse(path.read_text())
    package = ["sitecal", *path.relative_to(SRC).parent.parts]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            names.add(module)
            if module == "sitecal":
                names.update(f"sitecal.{alias.name}" for alias in node.names)
    return names


MODULES = sorted(SRC.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_imports_point_down(path: Path) -> None:
    part = _part(path)
    assert part in LAYER, f"{path}: assign '{part}' a layer in tests/test_architecture.py"
    for name in _imports(path):
        top = name.split(".")[0]
        if part in ("metrics", "stats", "calibration"):
            assert top not in NUMERIC_FORBIDDEN, f"{path} imports {name}: the numeric core stays array-only"
        if top != "sitecal" or name == "sitecal":
            continue
        target = name.split(".")[1]
        if target == "__version__":
            continue
        assert target in LAYER, f"{path} imports unknown sitecal part {name}"
        if target == part or LAYER[target] == 1:
            continue
        assert target in ALLOWED.get(part, set()), f"{path} ({part}) must not import {name}"


def test_nothing_imports_run_or_cli() -> None:
    for path in MODULES:
        if _part(path) in ("run", "cli"):
            continue
        for name in _imports(path):
            assert not name.startswith(("sitecal.run", "sitecal.cli")), f"{path} imports {name}"


@pytest.mark.parametrize("package", ["sitecal.metrics", "sitecal.stats", "sitecal.calibration"])
def test_the_numeric_core_imports_no_heavy_library(package: str) -> None:
    """Importing the numeric core in a fresh interpreter loads no torch, MONAI, pydicom or reportlab."""
    import subprocess
    import sys

    heavy = ("torch", "monai", "pydicom", "reportlab", "matplotlib", "yaml", "pydantic")
    code = (
        f"import sys, {package}; "
        f"print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in {heavy!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"import {package} loads {out.stdout.strip()}"
