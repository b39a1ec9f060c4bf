from __future__ import annotations

import os
from pathlib import Path

import pytest
import stormpy

STORM_FILES = Path(os.path.dirname(stormpy.__file__)) / "examples" / "files"
REPO = Path(__file__).resolve().parents[1]
SHARED_MODELS = REPO.parent / "shared" / "models" / "coolmc"


@pytest.fixture
def storm_files() -> Path:
    return STORM_FILES


def coolmc(name: str) -> Path:
    path = SHARED_MODELS / name
    if not path.is_file():
        pytest.skip(f"reference model {path} not present (../shared/models/coolmc is only beside a checkout)")
    return path
