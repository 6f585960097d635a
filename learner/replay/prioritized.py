"""PrioritizedReplay: FrameReplay with proportional prioritization (Schaul et al. 2016; Ape-X).

Slot k is drawn with probability ``p_k**alpha / sum_j p_j**alpha`` over the sampleable slots (frame_ring.py); a new slot
gets ``|initial| + eps`` (Ape-X: the actor's n-step TD errors, at most MAX_PRIORITY) or the largest priority so far,
``update_priorities`` sets ``|td| + eps``, and a sample's ``weight`` is ``(N * P(k))**-beta`` over the batch's largest.
A slot with no successor step (a truncation) holds no mass, as it is never sampled; draws still outside the
sampleable slots after the rejection rounds are made uniformly over them (counted), so no mix of priorities can stop
sampling. The priorities and their sum tree are host numpy whatever the device.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from learner.replay.frame_ring import FrameReplay, _check, host_array, to_device
from learner.replay.sum_tree import SumTree
from shared.wire.protocol import MAX_PRIORITY

_MAX_REJECT_ROUNDS = 64


class PrioritizedReplay(FrameReplay):
    def __init__(
        self,
        *args: Any,
        alpha: float = 0.6,
        eps: float = 1e-3,
        beta_schedule: Callable[[int], float] | None = None,
        **kwargs: Any,
    ):
        """``beta_schedule``: the importance-sampling exponent at a run's env steps (``anneal``); None: 1."""
        super().__init__(*args, **kwargs)
        self.beta_schedule = beta_schedule
        _check(isinstance(alpha, (int, float)) and 0.0 <= alpha <= 1.0, f"alpha={alpha!r} must be in [0, 1]")
        _check(isinstance(eps, (int, float)) and eps > 0.0, f"eps={eps!r} must be > 0")
        self.alpha, self.eps = float(alpha), float(eps)
        self._prio = np.zeros(self.capacity, dtype=np.float64)  # p**alpha of every slot, also while expired
        self._tree = SumTree(self.capacity)  # p**alpha of slots of live streams, else 0
        self._zeroed = np.zeros(self.num_streams, dtype=bool)  # streams whose leaves are zero in the tree
        self.max_priority = 1.0
        self._weight_min = np.inf  # smallest IS weight drawn since the last priority_stats()
        self.uniform_draws = 0  # draws made uniformly after the rejection rounds (a replay whose mass sits elsewhere)

    def saved_arrays(self) -> dict[str, torch.Tensor | np.ndarray]:
        return super().saved_arrays() | {"priorities": self._prio}

    def saved_scalars(self) -> dict[str, float]:
        return super().saved_scalars() | {"max_priority": self.max_priority}

    def restored(self, scalars: dict[str, float]) -> None:
        super().restored(scalars)
        self.max_priority = float(scalars["max_priority"])
        self._tree.update(np.arange(self.capacity), self._prio)  # every stream's mass, then the expired ones zeroed
        self._zeroed[:] = False
        self._zero(np.flatnonzero(self._expired()))

    def _zero(self, streams: np.ndarray) -> None:
        """Take ``streams``' mass out of the tree (their priorities stay, for when they write again)."""
        C = self.stream_capacity
        for s in streams:
            self._tree.update(np.arange(s * C, (s + 1) * C), 0.0)
            self._zeroed[s] = True

    def anneal(self, env_steps: int) -> None:
        """Set ``beta``, the importance-sampling exponent of the next draws, to its schedule's at ``env_steps``."""
        if self.beta_schedule is not None:
            self.beta = float(self.beta_schedule(env_steps))

    def update_priorities(self, stream: Any, slot: Any, td: Any) -> int:
        """Set p = |td| + eps for sampled (stream, absolute slot) pairs; returns how many were still retained."""
        stream = _numpy(stream).astype(np.int64).reshape(-1)
        slot = _numpy(slot).astype(np.int64).reshape(-1)
        td = _numpy(td).astype(np.float64).reshape(-1)
        if not (stream.shape == slot.shape == td.shape):
            raise ValueError(f"stream, slot and td must have one shape, got {stream.shape}, {slot.shape}, {td.shape}")
        if not np.isfinite(td).all():
            raise ValueError("td contains non-finite values")
        C = self.stream_capacity
        p = np.abs(td) + self.eps
        with self._lock:
            keep = slot >= self._head[stream] - C  # not overwritten since it was sampled
            stream, slot, p = stream[keep], slot[keep], p[keep]
            if p.size == 0:
                return 0
            self.max_priority = max(self.max_priority, float(p.max()))
            leaf = stream * C + slot % C
            value = p**self.alpha
            self._prio[leaf] = value
            live = ~self._zeroed[stream]
            self._tree.update(leaf[live], value[live])
            return int(p.size)

    def priority_stats(self) -> dict[str, float]:
        """Mean and max priority p over the slots held, the IS-weight minimum since the last call (max is 1)."""
        with self._lock:
            C = self.stream_capacity
            mask = np.arange(C)[None, :] < np.minimum(self._head, C)[:, None]  # the slots held
            p = self._prio.reshape(self.num_streams, C)[mask] ** (1.0 / self.alpha) if self.alpha > 0 else None
            weight_min, self._weight_min = self._weight_min, np.inf
        if p is None or p.size == 0:
            return {"priority_mean": 0.0, "priority_max": 0.0, "weight_min": 1.0}
        return {
            "priority_mean": float(p.mean()),
            "priority_max": float(p.max()),
            "weight_min": float(weight_min) if np.isfinite(weight_min) else 1.0,
        }

    def _checked_priorities(self, priorities: Any, actions: Any) -> Any:
        if priorities is not None:
            priorities = _numpy(priorities).astype(np.float64)
            shape = tuple(actions.shape)
            _check(priorities.shape == shape, f"priorities shape {priorities.shape} must equal the actions' {shape}")
            _check(np.isfinite(priorities).all() and (priorities >= 0).all(), "priorities must be finite and >= 0")
            worst = float(priorities.max(initial=0.0))
            _check(worst <= MAX_PRIORITY, f"priority {worst:.3g} is above the bound {MAX_PRIORITY:g}")
        return priorities

    def _written_hook(self, stream0: int, E: int, head: int, T: int, priorities: Any) -> None:
        """Under the lock: the new slots' priorities into the tree (an expired stream's come back)."""
        C = self.stream_capacity
        value = np.full((E, T), self.max_priority**self.alpha) if priorities is None else (priorities + self.eps) ** self.alpha
        streams = np.arange(stream0, stream0 + E)
        leaf = (streams[:, None] * C + (head + np.arange(T)) % C).reshape(-1)
        self._prio[leaf] = value.reshape(-1)
        # a slot followed by an episode's first frame without terminating has no successor: no mass (never sampled);
        # known now for the batch's slots but its last, and for the slot before the batch (unless the batch overwrote it)
        j0 = head - 1 if 0 < head and T < C else head
        j = j0 + np.arange(head + T - 1 - j0)
        at, after = streams[:, None] * C + j % C, streams[:, None] * C + (j + 1) % C
        no_successor = self._first_host.reshape(-1)[after] & ~self._terminated_host.reshape(-1)[at]
        self._prio[at[no_successor]] = 0.0
        self._tree.update(leaf, self._prio[leaf])
        if j0 < head:
            self._tree.update(at[:, 0], self._prio[at[:, 0]])
        for s in streams[self._zeroed[streams]]:  # an expired stream writes again: its retained slots come back
            self._tree.update(np.arange(s * C, (s + 1) * C), self._prio[s * C : (s + 1) * C])
        self._zeroed[streams] = False

    def _draw(self, lo: np.ndarray, counts: np.ndarray, generator: torch.Generator | None):
        """Draws in proportion to the tree's leaves, rejecting unsampleable slots; the first call is stratified. Draws
        still outside after the rejection rounds (the mass sits on slots not yet sampleable) are made uniformly."""
        self._zero(np.flatnonzero(self._expired() & ~self._zeroed))  # newly expired: remove their mass
        tree, heads, hi, C = self._tree, self._head.copy(), lo + counts, self.stream_capacity
        uniform = super()._draw(lo, counts, generator)
        stratified = True

        def draw(k: int) -> tuple[np.ndarray, np.ndarray]:
            nonlocal stratified
            total = tree.total
            stream = np.empty(k, dtype=np.int64)
            slot = np.empty(k, dtype=np.int64)
            todo = np.arange(k)
            for _ in range(_MAX_REJECT_ROUNDS if total > 0 else 0):
                u = torch.rand(todo.size, generator=generator, dtype=torch.float64).numpy()
                if stratified:
                    u = (np.arange(todo.size) + u) / todo.size
                    stratified = False
                leaf = tree.find(u * total)
                s, pos = leaf // C, leaf % C
                h = heads[s]
                a = np.where(h >= C, h - C + (pos - h) % C, pos)
                ok = (a >= lo[s]) & (a < hi[s])
                stream[todo[ok]], slot[todo[ok]] = s[ok], a[ok]
                todo = todo[~ok]
                if todo.size == 0:
                    return stream, slot
            stream[todo], slot[todo] = uniform(int(todo.size))
            self.uniform_draws += int(todo.size)
            return stream, slot

        return draw

    def _sampled(self, stream: np.ndarray, slot: np.ndarray, counts: np.ndarray, beta: float) -> dict:
        leaf = stream * self.stream_capacity + slot % self.stream_capacity  # the host's draw: no copy back
        prob = self._tree.get(leaf) / self._tree.total
        weight = (float(counts.sum()) * prob) ** -float(beta)
        weight /= weight.max()
        self._weight_min = min(self._weight_min, float(weight.min()))
        return {"weight": to_device(torch.from_numpy(weight.astype(np.float32)), self.device)}

    @property
    def nbytes(self) -> int:
        return super().nbytes + self._prio.nbytes + self._tree.tree.nbytes


def _numpy(x: Any) -> np.ndarray:
    return host_array(x.detach()) if isinstance(x, torch.Tensor) else np.asarray(x)
