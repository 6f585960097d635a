"""The consolidated queue's bounds (learner/staging.py): batches and bytes, a line the first time the bytes bite."""

import queue
import threading
import time

import numpy as np
import pytest

from learner.staging import StagingQueue, batch_bytes
from shared.config import ConfigError, TransportConfig
from shared.wire import protocol


def test_the_queue_holds_at_most_max_bytes_and_says_so_once():
    lines: list[str] = []
    q = StagingQueue(maxsize=10, max_bytes=100, size=len, echo=lines.append)
    q.put(b"a" * 60)
    with pytest.raises(queue.Full):
        q.put(b"b" * 50, timeout=0.01)  # 110 bytes would pass the bound
    with pytest.raises(queue.Full):
        q.put_nowait(b"b" * 50)  # the same batch tried again: still one bite
    assert (q.qsize(), q.bytes, q.bytes_full, len(lines)) == (1, 60, 1, 1)
    assert "transport.max_staged_bytes=100" in lines[0] and "60 bytes in 1 batch(es)" in lines[0]
    q.put_nowait(b"c" * 40)  # up to the bound exactly
    assert q.get_nowait() == b"a" * 60 and q.bytes == 40  # first in, first out; its bytes are given back
    q.put_nowait(b"b" * 50)
    assert (q.qsize(), q.bytes) == (2, 90)
    with pytest.raises(queue.Full):
        q.put_nowait(b"d" * 20)
    assert q.bytes_full == 2 and len(lines) == 1  # counted again, said once


def test_the_count_bound_holds_too_and_an_empty_queue_takes_any_one_batch():
    lines: list[str] = []
    q = StagingQueue(maxsize=2, max_bytes=1 << 20, size=len, echo=lines.append)
    q.put_nowait(b"a")
    q.put_nowait(b"b")
    with pytest.raises(queue.Full):
        q.put_nowait(b"c")
    assert q.bytes_full == 0 and lines == []  # the count held it back, not the bytes
    big = StagingQueue(maxsize=2, max_bytes=100, size=len, echo=lines.append)
    big.put_nowait(b"x" * 500)  # larger than the bound, into an empty queue: it passes, alone
    assert big.bytes == 500
    with pytest.raises(queue.Full):
        big.put_nowait(b"y")
    assert big.get_nowait() == b"x" * 500 and big.bytes == 0 and big.empty()


def test_a_waiting_put_goes_through_once_the_learner_takes_a_batch():
    q = StagingQueue(maxsize=4, max_bytes=100, size=len, echo=lambda line: None)
    q.put(b"a" * 80)
    done = threading.Event()

    def put() -> None:
        q.put(b"b" * 80)  # waits: 160 bytes would pass the bound
        done.set()

    thread = threading.Thread(target=put, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30  # a hang guard: until the put is held back by the bytes
    while q.bytes_full == 0:
        assert time.monotonic() < deadline, "the put was never held back"
        time.sleep(0.01)
    assert not done.is_set()
    assert q.get(timeout=30) == b"a" * 80
    thread.join(timeout=30)  # a hang guard
    assert done.is_set() and q.bytes == 80 and q.bytes_full == 1


def test_batch_bytes_counts_every_array_a_decoded_batch_keeps():
    limits = protocol.Limits(obs_shape=(36, 36), num_actions=7, max_envs=4, max_steps=16)
    shape = (2, 16)
    arrays = (
        np.zeros(shape + (36, 36), np.uint8),
        np.zeros(shape, np.uint8),
        np.zeros(shape, np.float32),
        np.zeros(shape, np.uint8),
        np.ones(shape, np.uint8),
    )
    stats = {k: 0.0 for k in protocol.STAT_KEYS}
    parts = [bytes(memoryview(p)) for p in protocol.encode_batch(0, 1, 0, 0, *arrays, stats=stats)]
    batch = protocol.decode_batch(parts, limits)
    assert batch_bytes(batch) == sum(a.nbytes for a in arrays) + batch.episodes.nbytes


def test_bad_bounds_name_their_value():
    with pytest.raises(ConfigError, match=r"transport.max_staged_bytes=1000 must be an integer >= 1048576"):
        TransportConfig(max_staged_bytes=1000).validate()
    with pytest.raises(ValueError, match=r"max_bytes=0"):
        StagingQueue(maxsize=1, max_bytes=0)
