"""The distributed check's same-node message pipes (:mod:`distmc.check.pipes`)."""

from __future__ import annotations

import os
import uuid

import numpy as np
import pytest

from distmc.check.channels import Mailbox, remove_segments
from distmc.check.pipes import Pipes, open_pipes
from distmc.errors import WorkerError


def _pair() -> tuple[str, list[Mailbox], list[Pipes]]:
    prefix = f"distmc-test-{uuid.uuid4().hex[:8]}"
    boxes = [Mailbox(), Mailbox()]
    pipes = [Pipes(prefix, r, [True, True], boxes[r].put) for r in range(2)]
    return prefix, boxes, pipes


def test_messages_arrive_in_the_peers_mailbox_unchanged() -> None:
    prefix, boxes, pipes = _pair()
    try:
        big = np.random.default_rng(1).random((3, 300_000))  # more than a pipe holds: the reader drains it
        for step in range(50):
            assert pipes[0].send(1, ("L", step, 0), np.arange(step, dtype=np.float64))
        assert pipes[1].send(0, ("m", 7, 1), big)
        for step in range(50):
            np.testing.assert_array_equal(boxes[1].take(("L", step, 0), timeout=10), np.arange(step, dtype=np.float64))
        got = boxes[0].take(("m", 7, 1), timeout=10)
        assert got.tobytes() == big.tobytes()
    finally:
        for p in pipes:
            p.close()
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(prefix)]


def test_a_peer_without_pipes_is_sent_to_through_ray() -> None:
    prefix = f"distmc-test-{uuid.uuid4().hex[:8]}"
    box = Mailbox()
    alone = Pipes(prefix, 0, [True, True], box.put)  # worker 1 never made its FIFO
    try:
        assert alone.send(1, ("m", 0, 0), np.zeros(2)) is False
        assert alone.send(1, ("m", 1, 0), np.zeros(2)) is False  # remembered
    finally:
        alone.close()
        remove_segments(prefix)


def test_a_closed_peer_is_an_error_not_a_hang() -> None:
    prefix, boxes, pipes = _pair()
    try:
        assert pipes[0].send(1, ("m", 0, 0), 1.0)
        assert boxes[1].take(("m", 0, 0), timeout=10) == 1.0
        pipes[1].close()
        with pytest.raises(WorkerError, match="closed its pipe"):
            for step in range(1, 100):  # the pipe's buffer may take a few before the write fails
                pipes[0].send(1, ("m", step, 0), np.zeros(10_000))
    finally:
        for p in pipes:
            p.close()
        remove_segments(prefix)


def test_no_pipes_without_a_prefix_or_a_same_node_peer() -> None:
    assert open_pipes(None, 0, ["a", "a"], lambda k, v: None) is None
    assert open_pipes("distmc-test-x", 0, ["a", "b"], lambda k, v: None) is None
