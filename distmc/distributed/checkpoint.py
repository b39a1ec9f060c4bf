"""Per-level checkpoints of a Ray run as Arrow IPC files, so that nothing explored is lost with a worker.

With ``--checkpoint-dir DIR`` every worker writes, at the end of each breadth-first level, the states it took in
and the rows it built in that level, and the driver then commits the level in ``meta.json``. The rows then live
on disk, not in the workers (the reducer reads them back at the end). Layout::

    DIR/meta.json                 the run (job, --checker, input file digests, key layout), the last committed level
    DIR/level-00000/states-r0.arrow   the initial states (written by the driver)
    DIR/level-DDDDD/states-rR.arrow   key, gid: the states first found in level D that worker R owns
    DIR/level-DDDDD/rows-rR.arrow     state, action, branches, reward:NAME: rows worker R built in level D
    DIR/level-DDDDD/trans-rR.arrow    target, prob: their transitions
    DIR/level-DDDDD/flags-rR.arrow    gid, loop, deadlock: the states worker R expanded in level D

Every file is written under a temporary name, fsynced and renamed when complete
(:mod:`distmc._internal.atomic`), and ``meta.json`` is replaced atomically after all workers have written a level,
so a level is either committed whole or not at all; files of a level after the committed one (a run interrupted
mid-level) and temporary files are removed when the run resumes. A write that fails (a full disk, a read-only
directory) ends the run with one line (:class:`~distmc.errors.StorageError`) that says the last good checkpoint
is kept, and how to resume from it.

The files do not depend on the number of workers (``R`` only names a file): states carry their global ids, and
a run resumed with another number of workers hands each state to its new owner. A lost worker is replaced and the
run goes on from the last committed level; ``distmc run --resume DIR`` continues a run that was stopped. The
inputs' SHA-256 digests are kept, and a run does not resume over a model or policy file that has changed.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from distmc._internal.atomic import checkpoint_note, storage_error, write_text
from distmc.distributed.arrowio import keys_from_arrow, keys_to_arrow, read_table, write_table
from distmc.errors import CheckpointError
from distmc.explore.priority import PRIORITY_CHECKPOINT
from distmc.pipeline import Job

__all__ = ["Checkpoint", "write_level"]

FORMAT = 1
_EMPTY = np.zeros(0, dtype=np.int64)


def file_digest(path: str | None) -> str | None:
    """SHA-256 of a file's content (None: not a file)."""
    if path is None or not Path(path).is_file():
        return None
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _absolute(job: Job) -> Job:
    """The job with its file paths absolute (a resumed run may start in another directory)."""

    def fix(p: str | None) -> str | None:
        return str(Path(p).resolve()) if p is not None and Path(p).is_file() else p

    return Job(
        **{**asdict(job), "model_path": fix(job.model_path), "policy": fix(job.policy), "interface": fix(job.interface)}
    )


def _level_dir(directory: Path, level: int) -> Path:
    return directory / f"level-{level:05d}"


def write_level(
    directory: str,
    level: int,
    rank: int,
    key_dtype: np.dtype,
    states: tuple[np.ndarray, np.ndarray],
    rows: list[tuple[np.ndarray, ...]],
    rewards: list[dict[str, np.ndarray]],
    flags: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
    reward_names: list[str],
) -> int:
    """Worker side: write one level's files of worker ``rank``; returns the bytes written.

    Args:
        directory: the checkpoint directory.
        level: the BFS level.
        rank: the worker.
        key_dtype: packed key dtype.
        states: (keys, gids) of the states first found in this level that the worker owns.
        rows: (row gid, row action, branch counts, target gids, prob) chunks of the rows built in this level.
        rewards: per chunk, reward name -> action rewards of its rows.
        flags: per chunk, (gids, loop, deadlock) of the expanded states.
        reward_names: the reward structures whose action rewards the rows carry.
    """
    d = _level_dir(Path(directory), level)
    note = checkpoint_note(directory, f"the levels committed before depth {level}" if level else None)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise storage_error(d, exc, note) from exc

    def cat(chunks: list[np.ndarray], dtype: type) -> np.ndarray:
        return np.concatenate(chunks).astype(dtype, copy=False) if chunks else np.zeros(0, dtype=dtype)

    size = write_table(
        d / f"states-r{rank}.arrow", {"key": keys_to_arrow(states[0], key_dtype), "gid": states[1]}, note
    )
    cols: dict[str, Any] = {
        "state": cat([r[0] for r in rows], np.int64),
        "action": cat([r[1] for r in rows], np.int64),
        "branches": cat([r[2] for r in rows], np.int64),
    }
    for name in reward_names:
        cols[f"reward:{name}"] = cat([r[name] for r in rewards], np.float64)
    size += write_table(d / f"rows-r{rank}.arrow", cols, note)
    size += write_table(
        d / f"trans-r{rank}.arrow",
        {"target": cat([r[3] for r in rows], np.int64), "prob": cat([r[4] for r in rows], np.float64)},
        note,
    )
    size += write_table(
        d / f"flags-r{rank}.arrow",
        {
            "gid": cat([f[0] for f in flags], np.int64),
            "loop": cat([f[1] for f in flags], np.bool_),
            "deadlock": cat([f[2] for f in flags], np.bool_),
        },
        note,
    )
    return size


def read_rows(
    directory: str | Path, level: int
) -> Iterator[tuple[tuple[np.ndarray, ...], dict[str, np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]]:
    """Every rows file of levels ``0..level``: ((row gid, action, counts, target gids, prob), action rewards, flags).

    One file set (a level of one worker) at a time, so a reader that keeps part of them holds one set at most.
    """
    for lv in range(level + 1):
        for f in sorted(_level_dir(Path(directory), lv).glob("rows-r*.arrow")):
            rank = f.name[len("rows-") :]
            rows, trans, flags = (
                read_table(f),
                read_table(f.with_name("trans-" + rank)),
                read_table(f.with_name("flags-" + rank)),
            )
            names = [c[len("reward:") :] for c in rows.column_names if c.startswith("reward:")]
            yield (
                (
                    rows.column("state").to_numpy(),
                    rows.column("action").to_numpy(),
                    rows.column("branches").to_numpy(),
                    trans.column("target").to_numpy(),
                    trans.column("prob").to_numpy(),
                ),
                {n: rows.column(f"reward:{n}").to_numpy() for n in names},
                (
                    flags.column("gid").to_numpy(),
                    flags.column("loop").to_numpy(zero_copy_only=False),
                    flags.column("deadlock").to_numpy(zero_copy_only=False),
                ),
            )


class Checkpoint:
    """A checkpoint directory: its metadata, level commits, and reading the levels back."""

    def __init__(self, directory: Path, meta: dict[str, Any]) -> None:
        self.directory = directory
        self.meta = meta

    # -- opening -----------------------------------------------------------------------------------------------

    @classmethod
    def create(
        cls, directory: str | Path, job: Job, key_dtype: np.dtype, reward_names: list[str], checker: str = "auto"
    ) -> Checkpoint:
        """A new checkpoint for ``job`` in ``directory`` (which must not hold one already).

        ``checker`` (``--checker``) is kept so that a resumed run checks the model as the first run asked.
        """
        d = Path(directory)
        if (d / "meta.json").exists():
            raise CheckpointError(
                f"{d} already holds a checkpoint: continue it with --resume {d}, or choose another --checkpoint-dir"
            )
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CheckpointError(f"--checkpoint-dir {d}: cannot create it: {exc}") from None
        job = _absolute(job)
        meta = {
            "format": FORMAT,
            "job": asdict(job),
            "digests": {k: file_digest(getattr(job, k)) for k in ("model_path", "policy", "interface")},
            "key_dtype": np.dtype(key_dtype).str,
            "reward_names": list(reward_names),
            "checker": checker,
            "level": -1,
            "states": 0,
            "transitions": 0,
            "policy_states": 0,
            "policy_calls": 0,
        }
        ckpt = cls(d, {"level": -1})
        ckpt._save(meta)
        return ckpt

    @classmethod
    def open(cls, directory: str | Path) -> Checkpoint:
        """An existing checkpoint; its inputs must be unchanged."""
        d = Path(directory)
        try:
            meta = json.loads((d / "meta.json").read_text())
        except FileNotFoundError:
            raise CheckpointError(
                f"--resume {d}: no checkpoint there (no meta.json); was the run started with --checkpoint-dir {d}?"
            ) from None
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"--resume {d}: cannot read meta.json: {exc}") from None
        if meta.get("format") != FORMAT:
            raise CheckpointError(f"--resume {d}: checkpoint format {meta.get('format')} is not {FORMAT}")
        ckpt = cls(d, meta)
        job = ckpt.job
        for k, digest in meta["digests"].items():
            now = file_digest(getattr(job, k))
            if digest is not None and now != digest:
                raise CheckpointError(
                    f"--resume {d}: {getattr(job, k)} has changed (or is gone) since the checkpoint "
                    f"was written; resuming would mix two different runs"
                )
        if meta["level"] < 0 and not (d / PRIORITY_CHECKPOINT).is_file():  # a --width run saves its own file
            raise CheckpointError(f"--resume {d}: the run stopped before its initial states were saved; start it again")
        return ckpt

    @property
    def job(self) -> Job:
        return Job(**{"policy_dtype": "float32", **self.meta["job"]})  # before float64 policies: float32

    @property
    def level(self) -> int:
        """The last committed level (0: the initial states only)."""
        return int(self.meta["level"])

    @property
    def key_dtype(self) -> np.dtype:
        return np.dtype(self.meta["key_dtype"])

    def _save(self, meta: dict[str, Any]) -> None:
        """Replace ``meta.json`` by ``meta`` (atomically, fsynced); the kept metadata is ``meta`` once it is written."""
        write_text(
            self.directory / "meta.json",
            json.dumps(meta, indent=1),
            sync=True,
            note=checkpoint_note(self.directory, f"the levels up to depth {self.level}" if self.level >= 0 else None),
        )
        self.meta = meta

    # -- writing -----------------------------------------------------------------------------------------------

    def write_initial(self, keys: np.ndarray, gids: np.ndarray) -> None:
        """Level 0: the initial states, committed at once."""
        write_level(str(self.directory), 0, 0, self.key_dtype, (keys, gids), [], [], [], self.meta["reward_names"])
        self.commit(0, int(keys.shape[0]), 0, 0, 0)

    def commit(self, level: int, states: int, transitions: int, policy_states: int, policy_calls: int) -> None:
        """Every worker has written ``level``: make it part of the checkpoint."""
        self._save(
            {
                **self.meta,
                "level": level,
                "states": states,
                "transitions": transitions,
                "policy_states": policy_states,
                "policy_calls": policy_calls,
            }
        )

    def drop_uncommitted(self) -> None:
        """Remove the files of levels after the committed one (a run interrupted mid-level)."""
        for d in self.directory.glob("level-*"):
            if d.is_dir() and int(d.name.split("-")[1]) > self.level:
                shutil.rmtree(d)
        for f in [*self.directory.glob("*.tmp*"), *self.directory.glob("level-*/*.tmp*")]:  # a write cut short
            if f.is_file():
                f.unlink()

    # -- reading -----------------------------------------------------------------------------------------------

    def _files(self, kind: str) -> list[tuple[int, Path]]:
        out = []
        for level in range(self.level + 1):
            for f in sorted(_level_dir(self.directory, level).glob(f"{kind}-r*.arrow")):
                out.append((level, f))
        return out

    def states(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Keys ``[N]``, gids ``[N]`` and the level ``[N]`` in which each committed state was found."""
        keys, gids, levels = [], [], []
        for level, f in self._files("states"):
            t = read_table(f)
            keys.append(keys_from_arrow(t.column("key"), self.key_dtype))
            gids.append(t.column("gid").to_numpy())
            levels.append(np.full(t.num_rows, level, dtype=np.int64))
        if not keys:
            return np.zeros(0, dtype=self.key_dtype), _EMPTY, _EMPTY
        return np.concatenate(keys), np.concatenate(gids), np.concatenate(levels)

    def results(self) -> list[dict[str, Any]]:
        """The committed levels in the form :func:`distmc.distributed.exchange.gather` takes (one per file set)."""
        keys, gids, _ = self.states()
        out: list[dict[str, Any]] = [
            {
                "gids": gids,
                "keys": keys,
                "row_state": _EMPTY,
                "row_action": _EMPTY,
                "counts": _EMPTY,
                "targets": _EMPTY,
                "prob": np.zeros(0),
                "rewards": {n: np.zeros(0) for n in self.meta["reward_names"]},
                "flag_gids": _EMPTY,
                "loop": np.zeros(0, dtype=bool),
                "deadlock": np.zeros(0, dtype=bool),
            }
        ]
        del keys, gids
        for (row_state, row_action, counts, targets, prob), rewards, (flag_gids, loop, deadlock) in read_rows(
            self.directory, self.level
        ):
            out.append(
                {
                    "gids": _EMPTY,
                    "keys": np.zeros(0, dtype=self.key_dtype),
                    "row_state": row_state,
                    "row_action": row_action,
                    "counts": counts,
                    "targets": targets,
                    "prob": prob,
                    "rewards": {n: rewards[n] for n in self.meta["reward_names"]},
                    "flag_gids": flag_gids,
                    "loop": loop,
                    "deadlock": deadlock,
                }
            )
        return out
