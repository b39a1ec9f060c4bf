"""Files written whole or not at all: a temporary file beside the target, renamed over it once complete.

Every file distmc writes (checkpoints, reports, exports, Parquet tables, plots, policy and shield files) goes
through :func:`atomic_path` (for writers that take a path: matplotlib, pyarrow, numpy, torch) or
:func:`write_text` / :func:`write_bytes`. The data is written to a hidden temporary file in the target's
directory (``.NAME.tmp-PID-RANDOM.SUFFIX``: the suffix kept for writers that choose the format by it, the leading
dot so that a directory's readers, which look for ``NAME`` patterns, and ``pyarrow.dataset``, which skips hidden
files, never take it for a table), and moved over the target by ``os.replace`` once complete. With ``sync`` (the
checkpoints, the reports) the file is fsynced before the rename and its directory after it, so the new name
survives a power loss with its content.

So a process killed at any point leaves the previous file as it was and at most a temporary file that nothing
reads (:func:`is_temp` tells one; the checkpoints remove theirs when a run resumes). A write that fails (a full
disk, a read-only directory) removes its temporary file and raises :class:`~distmc.errors.StorageError`: one
line with the path and the reason, and what was kept (``note``).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from distmc.errors import StorageError

__all__ = [
    "TEMP_MARK",
    "atomic_path",
    "checkpoint_note",
    "is_temp",
    "save_figure",
    "storage_error",
    "write_bytes",
    "write_text",
]

#: What every temporary file's name holds (after its leading dot and the target's name).
TEMP_MARK = ".tmp-"


def is_temp(path: str | Path) -> bool:
    """Whether ``path`` names a temporary file (or folder) of :func:`atomic_path`, never a finished file."""
    name = Path(path).name
    return name.startswith(".") and TEMP_MARK in name


def storage_error(path: str | Path, exc: BaseException, note: str = "") -> StorageError:
    """The one-line error for a failed write of ``path``: the reason (``No space left on device``, ...), ``note``."""
    if isinstance(exc, OSError) and exc.errno:
        reason = os.strerror(exc.errno)
    else:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return StorageError(f"cannot write {path}: {reason}; " + (note or "the previous file, if any, is unchanged"))


def checkpoint_note(directory: str | Path, kept: str | None) -> str:
    """The ``note`` of a failed checkpoint write: what is ``kept`` in ``directory`` (None: nothing yet), how to go on."""
    if kept is None:
        return f"nothing is checkpointed in {directory} yet: run again once the directory is writable and has room"
    return (
        f"the last good checkpoint in {directory} ({kept}) is kept: continue with distmc run --resume "
        f"{directory} once the directory is writable and has room"
    )


def _fsync(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    """The directory entry's rename made durable (not every file system allows it: then nothing)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(
    path: str | Path,
    *,
    sync: bool = False,
    note: str = "",
    same_name: bool = False,
    errors: tuple[type[BaseException], ...] = (OSError,),
) -> Iterator[Path]:
    """A temporary path to write ``path``'s new content at; renamed to ``path`` when the block ends without error.

    Args:
        path: the file to write.
        sync: fsync the file before the rename and its directory after it (checkpoints, reports).
        note: what the :class:`~distmc.errors.StorageError` of a failed write says was kept.
        same_name: the temporary file has ``path``'s own name, in a hidden temporary folder beside it (for writers
            that store the file's name inside it, as TorchScript archives do).
        errors: the exceptions of the writer that mean the write failed (``OSError``; torch's writers also raise
            ``RuntimeError``). Any other exception propagates as it is, the temporary file removed.

    Raises:
        StorageError: the write, the fsync or the rename failed; ``path`` is as it was.
    """
    p = Path(path)
    folder: Path | None = None
    tmp = p.parent / f".{p.name}{TEMP_MARK}{os.getpid()}-{secrets.token_hex(4)}{p.suffix}"
    try:
        if same_name:
            folder = Path(tempfile.mkdtemp(prefix=f".{p.name}{TEMP_MARK}", dir=p.parent))
            tmp = folder / p.name
        yield tmp
        if sync:
            _fsync(tmp)
        os.replace(tmp, p)
        if sync:
            _fsync_dir(p.parent)
    except errors as exc:
        raise storage_error(p, exc, note) from exc
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def save_figure(fig: Any, path: str | Path, **savefig: Any) -> Path:
    """``fig.savefig(path, **savefig)`` atomically (the format from ``path``'s suffix), then the figure closed."""
    import matplotlib.pyplot as plt

    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, **savefig)
    finally:
        plt.close(fig)
    return Path(path)


def write_bytes(path: str | Path, data: bytes, *, sync: bool = False, note: str = "") -> Path:
    """Write ``data`` to ``path`` atomically (:func:`atomic_path`); returns the path."""
    with atomic_path(path, sync=sync, note=note) as tmp, open(tmp, "wb") as f:
        f.write(data)
    return Path(path)


def write_text(path: str | Path, text: str, *, sync: bool = False, note: str = "") -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically (:func:`atomic_path`); returns the path."""
    return write_bytes(path, text.encode(), sync=sync, note=note)
