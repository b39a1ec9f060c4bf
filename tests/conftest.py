from __future__ import annotations

import os
from collections.abc import Iterator
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


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    """A local Ray of 2 CPUs for the tests of one module (ended after them).

    Every Ray test module uses this one: by argument, or ``pytestmark = pytest.mark.usefixtures("local_ray")``.
    """
    ray = pytest.importorskip("ray", reason="the Ray driver needs ray")
    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()
