from __future__ import annotations

import os
import sys
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


@pytest.fixture(scope="session")
def _ray_for_the_session() -> Iterator[None]:
    """Ends the local Ray the Ray test modules share, after the last test (see :func:`local_ray`)."""
    yield
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()


@pytest.fixture(scope="module")
def local_ray(_ray_for_the_session: None) -> Iterator[None]:
    """A local Ray of 2 CPUs, shared by the Ray test modules (started by the first, ended after the last test).

    Every Ray test module uses this one: by argument, or ``pytestmark = pytest.mark.usefixtures("local_ray")``. One
    Ray for the session (not one a module) saves its start-up per module, and the actors a module's last run kept
    serve the next module's first run of the same shape. A module that needs a Ray of its own (a multi-node
    cluster) shuts this one down first (its actors with it); the next module here starts a new one.
    """
    ray = pytest.importorskip("ray", reason="the Ray driver needs ray")
    if not ray.is_initialized():
        from distmc.distributed import release_workers

        release_workers()  # handles of actors of an ended Ray, if any
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
