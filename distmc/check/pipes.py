"""Same-node message pipes for the distributed check: its many small messages without a Ray call each.

A pass of the distributed check's sound value iteration sends each peer one message per block (its new values of
the block, :mod:`distmc.check.block_exchange`), and often a max-reduction: small messages, many of them. Through
Ray each cost the sender about 0.6 ms and the receiver as much again (gridworld N=6 under the uniform policy, two
workers on one node: 9,869 messages a worker, 6.1 s sending and 9.7 s waiting of a 17.5 s check, the kernel 0.7 s;
``benchmarks/RESULTS.md``). Between workers on one node they go through named pipes instead, read by the check's
own thread (a thread that read them for it and woke it cost a second hand-over: 160 us a round trip against 60 us):

* every worker makes one FIFO per same-node peer for the messages to it (``{prefix}-{src}-{dst}.fifo`` in
  ``/dev/shm``) when the workers connect, and opens it non-blocking for reading and writing (the open does not
  wait for a writer, and no read sees an end of file while a peer has not opened yet);
* a sender opens the peer's FIFO for writing on its first message (the peer made it before any check started; one
  it cannot open, missing or without a reader, is sent to through Ray from then on) and writes each message as its
  length and its pickle, whole (one writer per FIFO: messages never interleave);
* a worker waiting for a message reads whatever its pipes hold into its mailbox until the message is there; a
  write that would block (the peer's pipe is full) reads too while it waits, so two workers writing to each other
  never wait on each other; a message that came through Ray (a peer without a pipe) and the driver's abort wake
  the wait through a pipe of the mailbox's own;
* the names are removed with the shared-memory channels' (:func:`~distmc.check.channels.remove_segments` takes
  every name of the check's prefix); :meth:`Pipes.close` closes the descriptors.

The bytes are the same either way (a pickle of the same payload); ``DISTMC_SHM=0`` on the driver turns the pipes off
with the channels (``tests/test_distributed_checker.py`` runs both).
"""

from __future__ import annotations

import fcntl
import os
import pickle
import select
import stat
import struct
import time
import weakref
from typing import Any

from distmc.check.channels import PEER_TIMEOUT_S, Mailbox
from distmc.errors import WorkerError

__all__ = ["Pipes", "open_pipes"]

_HEADER = struct.Struct("<Q")
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


class Pipes:
    """One worker's FIFOs: those it reads (from each same-node peer) and those it writes (opened on first use).

    Args:
        prefix: the check's unique file prefix (the shared-memory channels' prefix).
        rank: this worker.
        local: per worker, whether it runs on this node.
        mailbox: where the messages read go (and Ray's: its puts wake a wait here).
    """

    def __init__(self, prefix: str, rank: int, local: list[bool], mailbox: Mailbox) -> None:
        self.prefix, self.rank, self.local = prefix, rank, local
        self.dir = "/dev/shm"
        self.mailbox = mailbox
        self._in: dict[int, int] = {}  # peer -> the FIFO it writes to this worker
        self._buf: dict[int, bytearray] = {}  # per reading descriptor: the bytes of a message not yet whole
        self._out: dict[int, int | None] = {}  # None: could not open, use Ray
        self.paths: list[str] = []
        self.fds: list[int] = []
        self.closed = False
        weakref.finalize(self, _close_fds, self.fds, self.paths)
        try:
            self._wake_r, self._wake_w = os.pipe()
            self.fds += [self._wake_r, self._wake_w]
            os.set_blocking(self._wake_r, False)
            os.set_blocking(self._wake_w, False)
            for o, here in enumerate(local):
                if o == rank or not here:
                    continue
                path = self.path(o, rank)
                os.mkfifo(path, 0o600)
                self.paths.append(path)
                fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
                self.fds.append(fd)
                try:  # a larger pipe: fewer turns for a big message (the gathered graph of block_exchange)
                    fcntl.fcntl(fd, _F_SETPIPE_SZ, 1 << 20)
                except OSError:
                    pass
                self._in[o] = fd
                self._buf[fd] = bytearray()
        except BaseException:
            _close_fds(self.fds, self.paths)
            raise
        mailbox.wake = self._wake

    def path(self, src: int, dst: int) -> str:
        return os.path.join(self.dir, f"{self.prefix}-{src}-{dst}.fifo")

    def _wake(self) -> None:
        if self.closed:
            return
        try:
            os.write(self._wake_w, b"x")
        except OSError:  # full (a wake is pending anyway) or closed
            pass

    # -- sending --------------------------------------------------------------------------------------------------

    def _writer(self, p: int) -> int | None:
        if p in self._out:
            return self._out[p]
        fd: int | None = None
        if self.local[p] and p != self.rank and not self.closed:
            path = self.path(self.rank, p)
            try:
                if stat.S_ISFIFO(os.stat(path).st_mode):
                    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)  # no reader: ENXIO at once, not a wait
                    self.fds.append(fd)
            except OSError:
                fd = None
        self._out[p] = fd
        return fd

    def send(self, p: int, key: Any, payload: Any) -> bool:
        """Send ``(key, payload)`` to peer ``p`` through its pipe; False: it has none (send it through Ray)."""
        fd = self._writer(p)
        if fd is None:
            return False
        body = pickle.dumps((key, payload), protocol=pickle.HIGHEST_PROTOCOL)
        view = memoryview(_HEADER.pack(len(body)) + body)
        deadline = time.monotonic() + PEER_TIMEOUT_S
        while view.nbytes:
            try:
                view = view[os.write(fd, view) :]
            except BlockingIOError:  # the peer's pipe is full: read this worker's own while it drains
                if time.monotonic() > deadline:
                    raise WorkerError(f"worker {p} took nothing from its pipe for {PEER_TIMEOUT_S:.0f} s") from None
                self._pump(1.0, fd)
            except BrokenPipeError as e:
                raise WorkerError(f"worker {p} closed its pipe during the check") from e
        return True

    # -- receiving ------------------------------------------------------------------------------------------------

    def take(self, key: Any, timeout: float = PEER_TIMEOUT_S) -> Any:
        """The message ``key`` (from a pipe or through Ray), reading the pipes until it is there."""
        deadline = time.monotonic() + timeout
        while True:
            there, payload = self.mailbox.pop(key)
            if there:
                return payload
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerError(f"worker {key[2]} sent nothing for {timeout:.0f} s during the check")
            self._pump(min(left, 1.0))

    def _pump(self, timeout: float, writable: int | None = None) -> None:
        """Wait up to ``timeout`` for a pipe to hold something (or ``writable`` to take more); read every message."""
        fds = [*self._in.values(), self._wake_r]
        readable, _, _ = select.select(fds, [] if writable is None else [writable], [], timeout)
        for fd in readable:
            if fd == self._wake_r:
                try:
                    os.read(self._wake_r, 4096)
                except BlockingIOError:
                    pass
                continue
            buf = self._buf[fd]
            while True:
                try:
                    chunk = os.read(fd, 1 << 20)
                except BlockingIOError:
                    break
                if not chunk:
                    break
                buf += chunk
            self._frames(buf)

    def _frames(self, buf: bytearray) -> None:
        # every whole message at the start of buf into the mailbox; the rest stays
        at = 0
        while len(buf) - at >= _HEADER.size:
            (size,) = _HEADER.unpack_from(buf, at)
            if len(buf) - at - _HEADER.size < size:
                break
            key, payload = pickle.loads(memoryview(buf)[at + _HEADER.size : at + _HEADER.size + size])
            at += _HEADER.size + size
            self.mailbox.put(key, payload)
        if at:
            del buf[:at]

    def close(self) -> None:
        """Close every descriptor (the names go too); again: nothing."""
        if self.closed:
            return
        self.closed = True
        if self.mailbox.wake == self._wake:
            self.mailbox.wake = None
        _close_fds(self.fds, self.paths)
        self._in.clear()

    def unlink(self) -> None:
        """Remove the FIFOs' names (open descriptors stay valid)."""
        _close_fds([], self.paths)


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


def open_pipes(prefix: str | None, rank: int, nodes: list[Any], mailbox: Mailbox) -> Pipes | None:
    """This worker's pipes to its same-node peers, or None (no prefix: ``DISTMC_SHM=0``; no such peer; no FIFOs)."""
    if prefix is None or not os.path.isdir("/dev/shm"):
        return None
    local = [n == nodes[rank] for n in nodes]
    if sum(local) < 2:
        return None
    try:
        return Pipes(prefix, rank, local, mailbox)
    except OSError:
        return None
