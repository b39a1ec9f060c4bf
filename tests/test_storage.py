"""Storage faults: every file is written whole or not at all, and a full or read-only disk is one line.

A write cut at any point (the writer raising midway, the process killed with SIGKILL in the middle of a large
write) leaves the previous file as it was and at most a hidden temporary file that no reader takes; a full disk
(``ENOSPC``) or a read-only directory (``EACCES``, ``EROFS``, ``EPERM``) ends in one line
(:class:`~distmc.errors.StorageError`) that names the path and the reason; a checkpoint whose commit fails keeps
the last good one, and a run resumes from it to the value of a run without the fault. The shared-memory names of
a distributed check that fails are all removed (``/dev/shm``).
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from distmc._internal import atomic
from distmc._internal.atomic import atomic_path, is_temp, save_figure, write_text
from distmc.api import verify
from distmc.cli import main
from distmc.distributed import checkpoint as checkpoint_mod
from distmc.distributed.arrowio import read_table
from distmc.distributed.checkpoint import Checkpoint, write_level
from distmc.errors import StorageError, WorkerError
from distmc.explore.priority import load_arrays, save_arrays
from distmc.pipeline import Job

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "distmc" / "examples" / "gridworld.prism"
PROP = 'P=? [F "crash"]'
OLD = b"the previous, complete content\n"


def full_disk(*_: Any, **__: Any) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def listing(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


# -- a write cut midway --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fault", [RuntimeError("cut"), KeyboardInterrupt(), OSError(errno.EIO, "I/O error")])
def test_a_writer_cut_midway_keeps_the_old_file(tmp_path: Path, fault: BaseException) -> None:
    target = tmp_path / "report.json"
    target.write_bytes(OLD)
    with pytest.raises(StorageError if isinstance(fault, OSError) else type(fault)), atomic_path(target) as tmp:
        tmp.write_bytes(b'{"half": ')
        assert is_temp(tmp) and tmp.parent == tmp_path and tmp.suffix == ".json"  # the format's suffix kept
        raise fault
    assert target.read_bytes() == OLD and listing(tmp_path) == ["report.json"]  # no temporary file left


def test_a_complete_write_replaces_the_file_and_leaves_nothing_else(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    target.write_bytes(OLD)
    write_text(target, '{"value": 1}', sync=True)
    assert target.read_text() == '{"value": 1}' and listing(tmp_path) == ["report.json"]
    with atomic_path(tmp_path / "net.pt", same_name=True) as tmp:  # writers that store their file's name in it
        assert tmp.name == "net.pt" and is_temp(tmp.parent)
        tmp.write_bytes(b"archive")
    assert listing(tmp_path) == ["net.pt", "report.json"]


def _induced() -> Any:
    got = verify(EXAMPLE, PROP, constants="N=3", checker="native", keep_model=True)
    assert isinstance(got, tuple)
    return got[1]


def _cut_drn(mp: pytest.MonkeyPatch, path: Path) -> None:
    from distmc.assemble import drn

    mp.setattr(drn, "_brackets", full_disk)  # the header is written, the first block fails
    drn.write_drn(_induced(), path)


def _cut_umb(mp: pytest.MonkeyPatch, path: Path) -> None:
    from distmc.assemble.storm import export

    real = tarfile.TarFile.addfile
    calls: list[int] = []

    def addfile(self: tarfile.TarFile, *a: Any, **kw: Any) -> None:
        calls.append(1)
        if len(calls) > 1:  # index.json is in the archive, the next member fails
            full_disk()
        real(self, *a, **kw)

    mp.setattr(tarfile.TarFile, "addfile", addfile)
    export(_induced(), path)


def _cut_parquet(mp: pytest.MonkeyPatch, path: Path) -> None:
    import pyarrow.parquet as pq

    from distmc.explain.values import write_values

    def half(table: Any, where: Any, **_: Any) -> None:
        Path(where).write_bytes(b"PAR1 half a table")
        full_disk()

    mp.setattr(pq, "write_table", half)
    write_values(path, {"x": np.arange(3), "value": np.zeros(3)})


def _cut_plot(mp: pytest.MonkeyPatch, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, _ = plt.subplots()

    def half(where: Any, **_: Any) -> None:
        Path(where).write_bytes(b"\x89PNG half")
        full_disk()

    fig.savefig = half  # type: ignore[method-assign, assignment]
    save_figure(fig, path, dpi=50)


def _cut_arrow(mp: pytest.MonkeyPatch, path: Path) -> None:
    mp.setattr(os, "fsync", full_disk)  # the checkpoint's file is written, its fsync fails
    write_level(
        str(path.parent.parent),
        1,
        0,
        np.dtype(np.uint64),
        (np.arange(4, dtype=np.uint64), np.arange(4)),
        [],
        [],
        [],
        [],
    )


def _cut_npz(mp: pytest.MonkeyPatch, path: Path) -> None:
    mp.setattr(os, "fsync", full_disk)
    save_arrays(path, {"keys": np.arange(5)})


SITES: dict[str, tuple[str, Callable[[pytest.MonkeyPatch, Path], None]]] = {
    "drn export": ("model.drn", _cut_drn),
    "umb export": ("model.umb", _cut_umb),
    "values parquet": ("values.parquet", _cut_parquet),
    "plot": ("plot.png", _cut_plot),
    "checkpoint level": ("level-00001/states-r0.arrow", _cut_arrow),
    "priority checkpoint": ("priority.npz", _cut_npz),
}


@pytest.mark.parametrize("site", list(SITES))
def test_a_full_disk_at_each_writer_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, site: str
) -> None:
    name, cut = SITES[site]
    target = tmp_path / name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(OLD)
    before = listing(tmp_path)
    with pytest.raises(StorageError) as err:
        cut(monkeypatch, target)
    message = str(err.value)
    assert f"cannot write {target}: No space left on device" in message and "\n" not in message
    assert target.read_bytes() == OLD and listing(tmp_path) == before


# -- a process killed in the middle of a large write ---------------------------------------------------------------

WRITER = """
import sys, time
from pathlib import Path
from distmc._internal.atomic import atomic_path
with atomic_path(Path(sys.argv[1]), sync=True) as tmp, open(tmp, "wb") as f:
    for _ in range(10_000):  # 10 GB at most: killed long before
        f.write(b"x" * (1 << 20))
        f.flush()
        time.sleep(0.002)
"""


def test_a_write_killed_midway_leaves_the_old_file_and_nothing_a_reader_takes(tmp_path: Path) -> None:
    level = tmp_path / "level-00001"
    level.mkdir()
    target = level / "rows-r0.arrow"
    from distmc.distributed.arrowio import write_table

    write_table(target, {"state": np.arange(10)})
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(target)], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}
    )
    try:
        deadline = time.monotonic() + 60
        while not any(is_temp(p) and p.stat().st_size > (8 << 20) for p in level.iterdir()):
            assert proc.poll() is None and time.monotonic() < deadline, "the writer ended before it was killed"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert read_table(target).column("state").to_pylist() == list(range(10))  # the old file, whole
    left = [p for p in level.iterdir() if p != target]
    assert left and all(is_temp(p) for p in left)  # the cut write: a hidden temporary file only
    assert sorted(level.glob("rows-r*.arrow")) == [target]  # what the checkpoint's readers look for


# -- a full disk, a read-only directory: one line ------------------------------------------------------------------

RUN = ["run", "example", "--const", "N=3", "--prop", PROP, "--quiet", "--checker", "native"]


def _one_line(capsys: pytest.CaptureFixture[str], path: Path, reason: str) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"distmc: error: cannot write {path}: {reason}"), err
    return err[0]


def test_cli_full_disk_is_one_line_and_keeps_the_old_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.json"
    out.write_bytes(OLD)
    monkeypatch.setattr(os, "fsync", full_disk)
    assert main([*RUN, "--json", str(out)]) == StorageError.exit_code
    _one_line(capsys, out, "No space left on device")
    assert out.read_bytes() == OLD and listing(tmp_path) == ["r.json"]


@pytest.mark.parametrize("code", [errno.EACCES, errno.EROFS, errno.EPERM])
def test_cli_read_only_directory_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], code: int
) -> None:
    """The temporary file cannot be made (tests run as root, where a mode does not stop writes: simulated)."""
    out = tmp_path / "r.json"
    real = open

    def refuse(file: Any, *a: Any, **kw: Any) -> Any:
        if Path(file).parent == tmp_path:
            raise OSError(code, os.strerror(code), str(file))
        return real(file, *a, **kw)

    monkeypatch.setattr(atomic, "open", refuse, raising=False)
    assert main([*RUN, "--json", str(out)]) == StorageError.exit_code
    _one_line(capsys, out, os.strerror(code))
    assert listing(tmp_path) == []


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes into a directory of mode 0o555")
def test_cli_read_only_directory_for_real(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "ro"
    d.mkdir()
    (d / "r.json").write_bytes(OLD)
    d.chmod(0o555)
    try:
        assert main([*RUN, "--json", str(d / "r.json")]) == StorageError.exit_code
        _one_line(capsys, d / "r.json", os.strerror(errno.EACCES))
        assert (d / "r.json").read_bytes() == OLD and listing(d) == ["r.json"]
    finally:
        d.chmod(0o755)


# -- checkpoints ---------------------------------------------------------------------------------------------------


def test_a_failed_commit_keeps_the_last_good_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ck = tmp_path / "ck"
    job = Job(str(EXAMPLE), PROP, "N=3")
    c = Checkpoint.create(ck, job, np.dtype(np.uint64), [])
    c.write_initial(np.arange(3, dtype=np.uint64), np.arange(3))
    write_level(str(ck), 1, 0, np.dtype(np.uint64), (np.arange(3, 5, dtype=np.uint64), np.arange(3, 5)), [], [], [], [])
    c.commit(1, 5, 0, 0, 0)
    write_level(str(ck), 2, 0, np.dtype(np.uint64), (np.arange(5, 9, dtype=np.uint64), np.arange(5, 9)), [], [], [], [])
    with monkeypatch.context() as mp:
        mp.setattr(os, "fsync", full_disk)
        with pytest.raises(
            StorageError,
            match=f"the last good checkpoint in {ck} \\(the levels up to depth 1\\) is "
            f"kept: continue with distmc run --resume {ck}",
        ):
            c.commit(2, 9, 0, 0, 0)
    assert c.level == 1  # the kept metadata is what is on disk
    again = Checkpoint.open(ck)
    assert again.level == 1 and again.states()[1].tolist() == list(range(5))
    again.drop_uncommitted()  # what a resume does first: the uncommitted level goes
    assert sorted({f.split("/")[0] for f in listing(ck)}) == ["level-00000", "level-00001", "meta.json"]
    assert not [f for f in ck.rglob("*") if is_temp(f)]


def test_a_failed_first_save_says_nothing_is_checkpointed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(StorageError, match="nothing is checkpointed in .* yet: run again"):
        Checkpoint.create(tmp_path / "ck", Job(str(EXAMPLE), PROP, "N=3"), np.dtype(np.uint64), [])
    assert listing(tmp_path / "ck") == []


def test_priority_checkpoint_kept_after_a_failed_save(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "priority.npz"
    save_arrays(p, {"keys": np.arange(3)})
    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(StorageError, match="the last round's\\) is kept: continue with distmc run --resume"):
        save_arrays(p, {"keys": np.arange(7)})
    assert load_arrays(p)["keys"].tolist() == [0, 1, 2] and listing(tmp_path) == ["priority.npz"]


# -- on Ray: a commit that fails, then --resume; a check that fails leaves nothing in /dev/shm ---------------------


@pytest.fixture
def ray_run(local_ray: None) -> None:
    """The Ray tests below (a local Ray, started once for the module)."""


def test_failed_checkpoint_commit_then_resume_gives_the_value(
    ray_run: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    reference = verify(EXAMPLE, PROP, constants="N=5")
    ck = tmp_path / "ck"
    real = checkpoint_mod.write_text

    def full_at_depth_3(path: Path, text: str, **kw: Any) -> Path:
        if json.loads(text)["level"] == 3:
            with monkeypatch.context() as mp:
                mp.setattr(os, "fsync", full_disk)
                return real(path, text, **kw)
        return real(path, text, **kw)

    monkeypatch.setattr(checkpoint_mod, "write_text", full_at_depth_3)
    assert (
        main(
            [
                "run",
                str(EXAMPLE),
                "--const",
                "N=5",
                "--prop",
                PROP,
                "--workers",
                "1",
                "--checkpoint-dir",
                str(ck),
                "--quiet",
            ]
        )
        == StorageError.exit_code
    )
    line = _one_line(capsys, ck / "meta.json", "No space left on device")
    assert line.endswith(
        f"the last good checkpoint in {ck} (the levels up to depth 2) is kept: continue with "
        f"distmc run --resume {ck} once the directory is writable and has room"
    )
    monkeypatch.undo()
    assert json.loads((ck / "meta.json").read_text())["level"] == 2 and not [p for p in ck.rglob("*") if is_temp(p)]
    got = verify(None, None, resume=ck, workers=1)
    assert not isinstance(got, tuple) and not isinstance(reference, tuple)
    assert (got.states, got.transitions, got.result) == (reference.states, reference.transitions, reference.result)


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm: the check sends through Ray only")
def test_no_shared_memory_left_after_a_check_that_fails(ray_run: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker killed after it made its channels' files and before its first exchange: the driver removes them."""
    from distmc.check.channels import SHM_DIR
    from distmc.distributed import coordinator

    prefix = f"distmc-{os.getpid()}-"
    real = coordinator._RayRun.get
    killed: list[list[str]] = []

    def get(self: Any, refs: Any) -> Any:
        out = real(self, refs)
        files = [n for n in os.listdir(SHM_DIR) if n.startswith(prefix)]
        if self.checking and files and not killed:  # every worker has connected: the files are there
            killed.append(files)
            os.kill(self.info[1]["pid"], signal.SIGKILL)
        return out

    monkeypatch.setattr(coordinator._RayRun, "get", get)
    with pytest.raises(WorkerError, match="lost during the distributed check"):
        verify(EXAMPLE, PROP, constants="N=5", workers=2, checker="distributed")
    assert killed and any(f.split("-")[-2] == "1" for f in killed[0])  # the killed worker had made its files
    assert [n for n in os.listdir(SHM_DIR) if n.startswith(prefix)] == []


def test_channels_remove_their_names_when_dropped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A check that fails before its first exchange drops its channels: their names go (and a sweep by prefix)."""
    import gc

    from distmc.check import channels

    monkeypatch.setattr(channels, "SHM_DIR", str(tmp_path))
    a = channels.open_channels("run1", 0, [0, 3], [0, 2], ["n", "n"])
    b = channels.open_channels("run1", 1, [2, 0], [3, 0], ["n", "n"])
    (tmp_path / "run2-0-1").write_bytes(b"another check's")
    assert a is not None and b is not None and listing(tmp_path) == ["run1-0-1", "run1-1-0", "run2-0-1"]
    del a
    gc.collect()
    assert listing(tmp_path) == ["run1-1-0", "run2-0-1"]
    assert channels.remove_segments("run1") == 1 and listing(tmp_path) == ["run2-0-1"]  # a killed worker's names
    b.unlink()  # its own name is gone already: nothing
