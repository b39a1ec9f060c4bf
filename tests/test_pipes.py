"""The distributed check's same-node message pipes (:mod:`distmc.check.pipes`)."""

from __future__ import annotations

import os
import threading
import uuid

import numpy as np
import pytest

from distmc.check.channels import Mailbox, remove_segments
from distmc.check.pipes import Pipes, open_pipes
from distmc.errors import WorkerError


def _pair() -> tuple[str, list[Pipes]]:
    prefix = f"distmc-test-{uuid.uuid4().hex[:8]}"
    return prefix, [Pipes(prefix, r, [True, True], Mailbox()) for r in range(2)]


def test_messages_arrive_unchanged_and_in_any_order_asked() -> None:
    prefix, pipes = _pair()
    try:
        for step in range(50):
            assert pipes[0].send(1, ("L", step, 0), np.arange(step, dtype=np.float64))
        for step in reversed(range(50)):  # the later ones first: the earlier wait in the mailbox
            np.testing.assert_array_equal(pipes[1].take(("L", step, 0), 10), np.arange(step, dtype=np.float64))
    finally:
        for p in pipes:
            p.close()
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(prefix)]


def test_two_workers_writing_more_than_a_pipe_holds_to_each_other_do_not_wait_on_each_other() -> None:
    prefix, pipes = _pair()
    big = [np.random.default_rng(r).random((3, 1_000_000)) for r in range(2)]  # 24 MB each way, at once
    got: list[object] = [None, None]

    def one(r: int) -> None:
        pipes[r].send(1 - r, ("G", 0, r), big[r])
        got[r] = pipes[r].take(("G", 0, 1 - r), 30)

    try:
        threads = [threading.Thread(target=one, args=(r,)) for r in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        for r in range(2):
            assert isinstance(got[r], np.ndarray) and got[r].tobytes() == big[1 - r].tobytes()  # type: ignore[union-attr]
    finally:
        for p in pipes:
            p.close()


def test_a_message_through_ray_and_an_abort_wake_the_wait() -> None:
    prefix, pipes = _pair()
    try:
        box = pipes[1].mailbox
        threading.Timer(0.2, box.put, args=(("m", 3, 0), "by ray")).start()
        assert pipes[1].take(("m", 3, 0), 10) == "by ray"
        threading.Timer(0.2, box.close, args=("another worker failed",)).start()
        with pytest.raises(WorkerError, match="another worker failed"):
            pipes[1].take(("m", 4, 0), 10)
    finally:
        for p in pipes:
            p.close()


def test_a_peer_without_pipes_is_sent_to_through_ray() -> None:
    prefix = f"distmc-test-{uuid.uuid4().hex[:8]}"
    alone = Pipes(prefix, 0, [True, True], Mailbox())  # worker 1 never made its FIFO
    try:
        assert alone.send(1, ("m", 0, 0), np.zeros(2)) is False
        assert alone.send(1, ("m", 1, 0), np.zeros(2)) is False  # remembered
    finally:
        alone.close()
        remove_segments(prefix)


def test_a_closed_peer_is_an_error_not_a_hang() -> None:
    prefix, pipes = _pair()
    try:
        assert pipes[0].send(1, ("m", 0, 0), 1.0)
        assert pipes[1].take(("m", 0, 0), 10) == 1.0
        pipes[1].close()
        with pytest.raises(WorkerError, match="closed its pipe"):
            pipes[0].send(1, ("m", 1, 0), np.zeros(10))
    finally:
        for p in pipes:
            p.close()
        remove_segments(prefix)


def test_no_pipes_without_a_prefix_or_a_same_node_peer() -> None:
    assert open_pipes(None, 0, ["a", "a"], Mailbox()) is None
    assert open_pipes("distmc-test-x", 0, ["a", "b"], Mailbox()) is None
