from __future__ import annotations

from pathlib import Path

import pytest

from sitecal.demo import DemoManifest, generate_demo


@pytest.fixture(scope="session")
def demo_cohort(tmp_path_factory: pytest.TempPathFactory) -> DemoManifest:
    """A small cohort (80 intact studies) shared by the read-only tests of this folder."""
    out: Path = tmp_path_factory.mktemp("demo-cohort")
    return generate_demo(out, n_studies=80, seed=3)
