from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DEMO_PROTOCOL = REPO / "protocols" / "demo.yaml"


@pytest.fixture
def demo_protocol_text() -> str:
    return DEMO_PROTOCOL.read_text()
