"""How the workers of the distributed check hear each other: a mailbox, and same-node shared-memory channels.

A :class:`Mailbox` holds the peers' messages (Ray calls) until the worker's check takes them. The rest of this
module is the channels, which carry a step's boundary values through shared memory.

Every step of the distributed check (:mod:`distmc.check.distributed`) sends each peer the values of the states
its rows point to. Through a Ray call that block is copied into the object store first: on avoid 10x10 with two
workers (7 MB a step) the call cost the sender 5-7 ms a step where the copy itself takes 0.5 ms (``ray.put`` alone
2.5 ms), about 0.6 s of a 16 s check, and the receiver waited for it as long. Workers on one node skip the store:

* each worker writes its block for peer ``p`` straight into a file of its own in ``/dev/shm``
  (``{prefix}-{rank}-{p}``: the gather from its vector is the only copy), and Ray carries just a note of which
  half of the file holds it (two halves used in turn);
* two halves are enough: a worker writes its ``m + 2``-th block into the half of its ``m``-th only after it got the
  peer's ``m + 1``-th, which the peer sends after it copied the ``m``-th out (every value exchange is all-to-all);
* the files are made when the workers connect (all of them, before any check starts), mapped by the peers when
  their check starts, and their names removed by their maker once every peer has sent it a message (it has mapped
  them then) or when its check ends; a mapping outlives its name, so nothing is left in ``/dev/shm``;
* a worker that never gets so far (a check that fails before its first exchange, a worker killed in between)
  leaves names behind only until the check ends: its :class:`Channels` remove their names when they are
  collected or the process exits (``weakref.finalize``), and the driver, and each worker told to abort, remove
  every name of the check's prefix on their node (:func:`remove_segments`).

Peers on other nodes, a node whose ``/dev/shm`` is missing or short of room (Ray's object store lives there too),
and a driver run with ``DISTMC_SHM=0`` in its environment use the Ray call as before. The values are the same
either way (the bytes are copied, not computed); ``tests/test_distributed_checker.py`` runs both.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from typing import Any

import numpy as np

from distmc.errors import WorkerError

__all__ = ["NVEC", "PEER_TIMEOUT_S", "SHM_DIR", "Channels", "Mailbox", "open_channels", "remove_segments"]

#: How long a worker waits for a peer's message before it gives up (a peer that is gone is seen by the driver
#: first, which then ends every worker; this bounds a wait nobody ends).
PEER_TIMEOUT_S = 1800.0


class Mailbox:
    """Messages from the peers, by (kind, step, source); a worker's check waits on it, Ray's thread fills it."""

    def __init__(self) -> None:
        self.box: dict[tuple[str, int, int], Any] = {}
        self.cv = threading.Condition()
        self.closed: str | None = None
        self.wake: Any = None  # called after every put and close (the pipes' wake-up)

    def put(self, key: tuple[str, int, int], payload: Any) -> None:
        with self.cv:
            self.box[key] = payload
            self.cv.notify_all()
        if self.wake is not None:  # a check that waits on its pipes (distmc.check.pipes) hears of it there
            self.wake()

    def pop(self, key: tuple[str, int, int]) -> tuple[bool, Any]:
        """(True, the message) if it is here, else (False, None); raises once the mailbox is closed."""
        with self.cv:
            if key in self.box:
                return True, self.box.pop(key)
            if self.closed is not None:
                raise WorkerError(f"the distributed check was stopped: {self.closed}")
            return False, None

    def close(self, why: str) -> None:
        """Wake every waiter with ``why`` (the driver ends a failed check)."""
        with self.cv:
            self.closed = why
            self.cv.notify_all()
        if self.wake is not None:
            self.wake()

    def take(self, key: tuple[str, int, int], timeout: float = PEER_TIMEOUT_S) -> Any:
        deadline = time.monotonic() + timeout
        with self.cv:
            while key not in self.box:
                if self.closed is not None:
                    raise WorkerError(f"the distributed check was stopped: {self.closed}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise WorkerError(f"worker {key[2]} sent nothing for {timeout:.0f} s during the check")
                self.cv.wait(min(left, 1.0))
            return self.box.pop(key)


SHM_DIR = "/dev/shm"
#: The most vectors one exchange carries through a channel (a sweep of both bounds sends two).
NVEC = 2


class Channels:
    """One worker's files to its same-node peers (written) and its maps of theirs (read), by peer rank.

    Args:
        prefix: the check's unique file prefix (every worker of a check is given the same).
        rank: this worker.
        send_sizes: per peer, how many values this worker sends it each step (its ``send`` list's length).
        recv_sizes: per peer, how many values it receives from it (its copies of that owner's states).
        local: per peer, whether it runs on this node.
    """

    def __init__(self, prefix: str, rank: int, send_sizes: list[int], recv_sizes: list[int], local: list[bool]) -> None:
        self.prefix, self.rank = prefix, rank
        self.recv_sizes, self.local = recv_sizes, local
        w = len(send_sizes)
        self.out: list[np.memmap | None] = [None] * w
        self.inp: list[np.memmap | None] = [None] * w
        self.turn = [0] * w  # blocks written to each peer so far (the half of the next: turn % 2)
        self.paths: list[str] = []
        weakref.finalize(self, _unlink_all, self.paths)  # collected, or the process exits: the names go too
        try:
            for p, size in enumerate(send_sizes):
                if p != rank and local[p] and size:
                    path = self.path(rank, p)
                    self.out[p] = np.memmap(path, dtype=np.float64, mode="w+", shape=(2, NVEC, size))
                    self.paths.append(path)
        except BaseException:
            self.unlink()
            raise

    def path(self, src: int, dst: int) -> str:
        return os.path.join(SHM_DIR, f"{self.prefix}-{src}-{dst}")

    def attach(self) -> None:
        """Map the same-node peers' files for this worker (once; a peer that made none sends through Ray)."""
        for o, size in enumerate(self.recv_sizes):
            if o != self.rank and self.local[o] and size and self.inp[o] is None:
                try:
                    self.inp[o] = np.memmap(self.path(o, self.rank), dtype=np.float64, mode="r", shape=(2, NVEC, size))
                except FileNotFoundError:
                    pass

    def write(self, p: int, vectors: list[np.ndarray], slots: np.ndarray) -> tuple[str, int, int] | None:
        """Write ``v[slots]`` of each vector into peer ``p``'s next half; the note to send (None: use Ray)."""
        buf = self.out[p]
        if buf is None or len(vectors) > NVEC:
            return None
        half = self.turn[p] % 2
        self.turn[p] += 1
        for j, v in enumerate(vectors):
            np.take(v, slots, out=buf[half, j], mode="clip")  # slots are in range: "raise" would buffer (2x slower)
        return ("shm", half, len(vectors))

    def read(self, o: int, note: tuple[str, int, int]) -> np.ndarray:
        """The ``[k, size]`` values peer ``o``'s note points to (a view of its file: copy them out before replying)."""
        buf = self.inp[o]
        if buf is None:
            raise AssertionError(f"worker {o} wrote to a channel this worker could not map")
        return buf[note[1], : note[2]]

    def unlink(self) -> None:
        """Remove this worker's files' names (their maps stay valid); again: nothing."""
        _unlink_all(self.paths)


def _unlink_all(paths: list[str]) -> None:
    """Remove the names in ``paths`` (gone already: nothing) and empty the list."""
    while paths:
        try:
            os.unlink(paths.pop())
        except FileNotFoundError:
            pass


def remove_segments(prefix: str) -> int:
    """Remove every file of the check ``prefix`` left in this node's ``/dev/shm`` (its workers' channels); how many.

    The driver calls it when a distributed check ends, and each worker when it is told to abort: names of a worker
    that was killed before it removed them go too (a peer's map of a file stays valid after its name is gone).
    """
    try:
        names = [n for n in os.listdir(SHM_DIR) if n.startswith(prefix + "-")]
    except OSError:
        return 0
    removed = 0
    for name in names:
        try:
            os.unlink(os.path.join(SHM_DIR, name))
            removed += 1
        except FileNotFoundError:
            pass
    return removed


def open_channels(
    prefix: str | None, rank: int, send_sizes: list[int], recv_sizes: list[int], nodes: list[Any]
) -> Channels | None:
    """This worker's channels to its same-node peers, or None (no prefix: the driver's ``DISTMC_SHM=0``; no such peer).

    A ``/dev/shm`` without four times the room its files take: channels that only receive.
    """
    if prefix is None or not os.path.isdir(SHM_DIR):
        return None
    local = [n == nodes[rank] for n in nodes]
    need = sum(2 * NVEC * 8 * s for p, s in enumerate(send_sizes) if p != rank and local[p])
    if not need and not any(s for o, s in enumerate(recv_sizes) if o != rank and local[o]):
        return None
    st = os.statvfs(SHM_DIR)
    if 4 * need > st.f_bavail * st.f_frsize:
        return Channels(prefix, rank, [0] * len(send_sizes), recv_sizes, local)  # receive only
    return Channels(prefix, rank, send_sizes, recv_sizes, local)
