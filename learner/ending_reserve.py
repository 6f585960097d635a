"""EndingReserve: the transitions that led to episode endings, kept after the replay ring overwrote them.

Why. A policy that has learned to pass a hazard stops dying there, so after one ring's worth of
transitions the replay holds no example of what failing at it costs. The reserve keeps the last
``steps`` transitions before every termination (Mario: a death or the flag) of the whole run, up to
``segments`` endings, and the replay draws a fixed share of each batch from it (learner/replay.py
``FrameReplay.sample``). Opt-in (``replay.ending_share``): on Mario 1-1 it did not stop the last
weights from losing hazards an earlier snapshot passed (docs/experiments/mario.md).

Contract. Each ending is one segment, one stream of this FrameReplay of ``L = stack - 1 + steps +
n_step`` slots: ``stack - 1`` slots of frame history, the ``steps`` transitions that end with the
terminated one, copied from the source ring with their flags (so a segment that reaches back into the
previous episode keeps its episode start, and a truncation inside it stays one), then ``n_step``
padding slots (first=1), as after a termination in the ring. A segment's sampleable slots are exactly
its ``steps`` transitions; stacks and n-step returns follow FrameReplay's rules within the segment. New
endings replace the oldest (round robin over the segments); a segment never expires. Endings whose
history the source no longer holds (or that lie before its first ``L - n_step`` slots) are skipped.
Draws are uniform over the held transitions.
"""

from __future__ import annotations

import numpy as np
import torch

from learner.replay import OBS_DTYPES, FrameReplay, _check, _is_int


class EndingReserve(FrameReplay):
    """A FrameReplay whose streams are ending segments (module docstring); ``source`` is the ring it copies from."""

    def __init__(self, source: FrameReplay, segments: int, steps: int):
        _check(_is_int(segments) and segments >= 1, f"segments={segments!r} must be an int >= 1")
        _check(_is_int(steps) and steps >= 1, f"steps={steps!r} must be an int >= 1")
        self.source = source
        self.steps = int(steps)
        self.history = source.stack - 1 + self.steps  # slots copied from the source per ending
        length = self.history + source.n_step
        super().__init__(num_streams=int(segments), capacity=int(segments) * length,
                         frame_shape=source.frame_shape, stack=source.stack, n_step=source.n_step,
                         gamma=source.gamma, device=source.device, obs_dtype=_dtype_name(source.obs_dtype),
                         num_actions=source.num_actions, masked=source.masked)
        self.kept = 0  # endings written, ever
        self._offsets_history = np.arange(self.history)

    def keep(self, stream0: int, head: int, terminated: np.ndarray) -> None:
        """Copy the segments of the terminations in the block just written to the source's streams stream0..+E-1
        from absolute slot ``head`` (``terminated``: the block's bool [E, T]). Called by the source under its lock."""
        rows, cols = np.nonzero(terminated)
        if rows.size == 0:
            return
        src, C = self.source, self.source.stream_capacity
        heads = src._head  # already advanced past the block
        for r, c in zip(rows.tolist(), cols.tolist()):  # a few endings per block at most
            stream, end = stream0 + r, head + c
            start = end - self.history + 1
            if start < max(0, int(heads[stream]) - C):
                continue  # its history is no longer (or not yet) in the ring
            pos = torch.as_tensor((start + self._offsets_history) % C, device=src.device)
            self._write_segment(stream, pos)

    def _write_segment(self, stream: int, pos: torch.Tensor) -> None:
        src, n, dev = self.source, self.n_step, self.device
        pad = (n, *self.frame_shape)
        frames = torch.cat([src._frames[stream, pos], torch.zeros(pad, dtype=self.obs_dtype, device=dev)])
        actions = torch.cat([src._actions[stream, pos], torch.zeros(n, dtype=src._actions.dtype, device=dev)])
        rewards = torch.cat([src._rewards[stream, pos], torch.zeros(n, device=dev)])
        terminated = torch.cat([src._terminated[stream, pos], torch.zeros(n, dtype=torch.bool, device=dev)])
        first = torch.cat([src._first[stream, pos], torch.ones(n, dtype=torch.bool, device=dev)])
        masks = None
        if self.masked:
            masks = torch.cat([src._masks[stream, pos], torch.zeros((n, self.mask_bytes), dtype=torch.uint8,
                                                                      device=dev)])[None]
        segment = self.kept % self.num_streams
        self.add(segment, frames[None], actions[None], rewards[None], terminated[None], first[None], masks=masks)
        self.kept += 1

    def endings_held(self) -> int:
        return min(self.kept, self.num_streams)

    def _ranges(self, heads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A written segment's sampleable slots are its ``steps`` transitions (module docstring)."""
        C = self.stream_capacity
        lo = heads - C + self.stack - 1
        return lo, np.where(heads > 0, self.steps, 0)

    def _expired(self) -> np.ndarray:
        return np.zeros(self.num_streams, dtype=bool)


def _dtype_name(dtype: torch.dtype) -> str:
    return next(name for name, value in OBS_DTYPES.items() if value == dtype)
