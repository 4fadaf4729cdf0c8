from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sitecal.demo import DemoManifest, generate_demo

#: Training and checks of the demo models: plain scripts outside the package, imported from their folder
#: as ``python examples/demo/train.py`` finds them.
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "demo"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))


@pytest.fixture(scope="session")
def demo_cohort(tmp_path_factory: pytest.TempPathFactory) -> DemoManifest:
    """A small cohort (80 intact studies) shared by the read-only tests of this folder."""
    out: Path = tmp_path_factory.mktemp("demo-cohort")
    return generate_demo(out, n_studies=80, seed=3)
