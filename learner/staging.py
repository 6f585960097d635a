"""The consolidated queue: decoded batches waiting for replay, bounded in batches and in bytes.

The consolidation thread puts, the learner's loop takes (learner/data_plane.py). A put waits while the queue holds
``maxsize`` batches or the batch would take it past ``max_bytes``; an empty queue takes any one batch, so one larger
than the bound still passes, alone. While a put waits the thread reads no socket: back-pressure reaches the actors.
"""

from __future__ import annotations

import collections
import queue
import time
from collections.abc import Callable
from typing import Any

from shared.wire import protocol


def batch_bytes(batch: protocol.Batch) -> int:
    """Bytes a decoded batch holds: its arrays, views on the received frames they keep alive."""
    arrays = (batch.frames, batch.actions, batch.rewards, batch.terminated, batch.first, batch.episodes)
    return sum(a.nbytes for a in (*arrays, batch.priorities, batch.masks) if a is not None)


class StagingQueue(queue.Queue):
    """A FIFO of batches bounded by ``maxsize`` batches (> 0) and ``max_bytes`` bytes (``size`` of each)."""

    def __init__(
        self,
        maxsize: int,
        max_bytes: int,
        size: Callable[[Any], int] = batch_bytes,
        echo: Callable[[str], None] = lambda line: print(line, flush=True),
    ):
        """``echo``: where the line goes the first time the byte bound holds a batch back."""
        if maxsize < 1 or max_bytes < 1:
            raise ValueError(f"maxsize={maxsize!r} and max_bytes={max_bytes!r} must both be >= 1")
        self.max_bytes, self._size, self.echo = int(max_bytes), size, echo
        self.bytes_full = 0  # times the byte bound held a batch back (counted once until a put gets through)
        super().__init__(maxsize)

    def _init(self, maxsize: int) -> None:
        super()._init(maxsize)
        self.bytes = 0  # held by the batches queued now
        self._sizes: collections.deque[int] = collections.deque()  # each queued batch's bytes, in queue order
        self._held_back = False  # the byte bound holds the current put back

    def _get(self) -> Any:
        self.bytes -= self._sizes.popleft()
        return self.queue.popleft()

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        """Queue ``item``, waiting (``block``, at most ``timeout`` s) while either bound is reached; else queue.Full."""
        size = self._size(item)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.not_full:
            while len(self.queue) >= self.maxsize or (self.queue and self.bytes + size > self.max_bytes):
                if len(self.queue) < self.maxsize and not self._held_back:  # the bytes, not the count, hold it back
                    self._held_back = True
                    self.bytes_full += 1
                    if self.bytes_full == 1:
                        self.echo(
                            f"[MAIN] the consolidated queue holds {self.bytes:,} bytes in {len(self.queue)} batch(es), at "
                            f"transport.max_staged_bytes={self.max_bytes:,}: the consolidation thread waits for the learner"
                        )
                remaining = None if deadline is None else deadline - time.monotonic()
                if not block or (remaining is not None and remaining <= 0):
                    raise queue.Full
                self.not_full.wait(remaining)
            self._held_back = False
            self.queue.append(item)
            self._sizes.append(size)
            self.bytes += size
            self.unfinished_tasks += 1
            self.not_empty.notify()
