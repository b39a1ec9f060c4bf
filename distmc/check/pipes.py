"""Same-node message pipes for the distributed check: its many small messages without a Ray call each.

A pass of the distributed check's sound value iteration sends each peer one message per breadth-first level (its
values of the level, :mod:`distmc.check.level_exchange`), and every step a max-reduction: small messages, many of
them. Through Ray each cost the sender about 0.6 ms and the receiver as much again (gridworld N=6 under the uniform
policy, two workers on one node: 9,869 messages a worker, 6.1 s sending and 9.7 s waiting of a 17.5 s check, the
kernel 0.7 s; ``benchmarks/RESULTS.md``). Between workers on one node they go through a named pipe instead:

* every worker makes one FIFO per same-node peer for the messages to it (``{prefix}-{src}-{dst}.fifo`` in
  ``/dev/shm``) when the workers connect, opens it for reading and writing (so that the open does not wait for a
  writer and no read sees an end of file while a peer has not opened yet), and starts one thread per FIFO that
  reads its messages and puts them into the worker's mailbox, exactly as Ray's ``deliver`` does;
* a sender opens the peer's FIFO for writing on its first message (the peer made it before any check started;
  one it cannot open, missing or without a reader, is sent to through Ray from then on) and writes a message as
  its length and its pickle; a FIFO has one writer, so messages never interleave, and the reading thread keeps the
  pipe draining, so a sender that writes more than the pipe holds waits only for that thread;
* the names are removed with the shared-memory channels' (:func:`~distmc.check.channels.remove_segments` takes
  every name of the check's prefix); :meth:`Pipes.close` ends the threads and closes the descriptors.

The bytes are the same either way (a pickle of the same payload); ``DISTMC_SHM=0`` on the driver turns the pipes off
with the channels (``tests/test_distributed_checker.py`` runs both).
"""

from __future__ import annotations

import os
import pickle
import stat
import struct
import threading
import weakref
from collections.abc import Callable
from typing import Any

from distmc.errors import WorkerError

__all__ = ["Pipes", "open_pipes"]

_HEADER = struct.Struct("<Q")
_STOP = 0  # a message of length 0 ends the reading thread


def _read_exactly(fd: int, n: int) -> bytes | None:
    """``n`` bytes from ``fd``, or None at an end of file (a closed descriptor: the pipes are being closed)."""
    chunks, got = [], 0
    while got < n:
        try:
            b = os.read(fd, min(n - got, 1 << 20))
        except OSError:
            return None
        if not b:
            return None
        chunks.append(b)
        got += len(b)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view.nbytes:
        n = os.write(fd, view)
        view = view[n:]


class Pipes:
    """One worker's FIFOs: those it reads (from each same-node peer) and those it writes (opened on first use).

    Args:
        prefix: the check's unique file prefix (the shared-memory channels' prefix).
        rank: this worker.
        local: per worker, whether it runs on this node.
        deliver: where a message read goes (``deliver(key, payload)``: the worker's mailbox).
    """

    def __init__(self, prefix: str, rank: int, local: list[bool], deliver: Callable[[Any, Any], None]) -> None:
        self.prefix, self.rank, self.local = prefix, rank, local
        self.dir = "/dev/shm"
        self._in: dict[int, int] = {}
        self._out: dict[int, int | None] = {}  # None: could not open, use Ray
        self._locks = {p: threading.Lock() for p in range(len(local))}
        self._threads: list[threading.Thread] = []
        self.paths: list[str] = []
        self.closed = False
        self._fds: list[int] = []  # the writing ends
        weakref.finalize(self, _shutdown, self._in, self._threads, self._fds, self.paths)
        try:
            for o, here in enumerate(local):
                if o == rank or not here:
                    continue
                path = self.path(o, rank)
                os.mkfifo(path, 0o600)
                self.paths.append(path)
                self._in[o] = os.open(path, os.O_RDWR)
        except BaseException:
            _close_fds(list(self._in.values()), self.paths)
            raise
        for o, fd in self._in.items():
            t = threading.Thread(target=self._read_loop, args=(fd, deliver), name=f"distmc-pipe-{o}", daemon=True)
            t.start()
            self._threads.append(t)

    def path(self, src: int, dst: int) -> str:
        return os.path.join(self.dir, f"{self.prefix}-{src}-{dst}.fifo")

    @staticmethod
    def _read_loop(fd: int, deliver: Callable[[Any, Any], None]) -> None:
        """Read messages from ``fd`` into ``deliver`` until a stop (or anything unreadable)."""
        try:
            while True:
                head = _read_exactly(fd, _HEADER.size)
                if head is None:
                    return
                (size,) = _HEADER.unpack(head)
                if size == _STOP:
                    return
                body = _read_exactly(fd, size)
                if body is None:
                    return
                key, payload = pickle.loads(body)
                deliver(key, payload)
        except Exception:  # noqa: BLE001 - a message cut by a closing check: the check has ended anyway
            return

    def _writer(self, p: int) -> int | None:
        if p in self._out:
            return self._out[p]
        fd: int | None = None
        if self.local[p] and p != self.rank and not self.closed:
            path = self.path(self.rank, p)
            try:
                if stat.S_ISFIFO(os.stat(path).st_mode):
                    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)  # no reader: ENXIO at once, not a wait
                    os.set_blocking(fd, True)
                    self._fds.append(fd)
            except OSError:
                fd = None
        self._out[p] = fd
        return fd

    def send(self, p: int, key: Any, payload: Any) -> bool:
        """Send ``(key, payload)`` to peer ``p`` through its pipe; False: it has none (send it through Ray)."""
        with self._locks[p]:
            fd = self._writer(p)
            if fd is None:
                return False
            body = pickle.dumps((key, payload), protocol=pickle.HIGHEST_PROTOCOL)
            try:
                _write_all(fd, _HEADER.pack(len(body)) + body)
            except BrokenPipeError as e:
                raise WorkerError(f"worker {p} closed its pipe during the check") from e
            return True

    def close(self) -> None:
        """End the reading threads and close every descriptor (the names go too); again: nothing."""
        if self.closed:
            return
        self.closed = True
        _shutdown(self._in, self._threads, self._fds, self.paths)

    def unlink(self) -> None:
        """Remove the FIFOs' names (open descriptors stay valid)."""
        _close_fds([], self.paths)


def _shutdown(readers: dict[int, int], threads: list[threading.Thread], fds: list[int], paths: list[str]) -> None:
    """Stop every reading thread (a stop through its own descriptor, opened read-write), then close everything."""
    for fd in readers.values():
        try:
            os.write(fd, _HEADER.pack(_STOP))
        except OSError:
            pass
    for t in threads:
        t.join(timeout=5.0)
    threads.clear()
    fds.extend(readers.values())
    readers.clear()
    _close_fds(fds, paths)


def _close_fds(fds: list[int], paths: list[str]) -> None:
    while paths:
        try:
            os.unlink(paths.pop())
        except FileNotFoundError:
            pass
    while fds:
        try:
            os.close(fds.pop())
        except OSError:
            pass


def open_pipes(prefix: str | None, rank: int, nodes: list[Any], deliver: Callable[[Any, Any], None]) -> Pipes | None:
    """This worker's pipes to its same-node peers, or None (no prefix: ``DISTMC_SHM=0``; no such peer; no FIFOs)."""
    if prefix is None or not os.path.isdir("/dev/shm"):
        return None
    local = [n == nodes[rank] for n in nodes]
    if sum(local) < 2:
        return None
    try:
        return Pipes(prefix, rank, local, deliver)
    except OSError:
        return None
