"""Figures of the learner's network on a fixed probe set (shared/probe_set.py): how often its greedy policy flips, and by
how much its best action leads.

``ProbeMonitor.observe(net)`` returns ``FIGURES`` of the network in eval mode and fp32: churn (share of greedy actions
changed since the last call), the median action gap (best minus second-best valid Q), that gap over |best Q|, the mean best Q.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from shared.network import masked_argmax

FIGURES = ("probe/churn", "probe/gap", "probe/gap_relative", "probe/q_mean")  # ProbeMonitor.observe's keys, in order


def probe_figures(
    q: torch.Tensor, masks: torch.Tensor | None = None, previous: torch.Tensor | None = None
) -> tuple[dict[str, float], torch.Tensor]:
    """The figures of Q-values ``q`` against the greedy actions ``previous`` (None: churn 0), and ``q``'s greedy actions."""
    q = q.float()
    greedy = masked_argmax(q, masks).squeeze(1)
    filled = q if masks is None else q.masked_fill(~masks.bool(), float("-inf"))
    if q.shape[1] >= 2:
        best, second = filled.topk(2, dim=1).values.unbind(1)
        gap = torch.where(torch.isfinite(second), best - second, torch.nan)  # one valid action: no gap
    else:
        best = filled[:, 0]
        gap = torch.full_like(best, torch.nan)
    relative = gap / best.abs().clamp_min(1e-6)
    churn = torch.zeros((), device=q.device) if previous is None else (greedy != previous).float().mean()
    figures = torch.stack([churn, gap.nanquantile(0.5), relative.nanquantile(0.5), best.mean()])
    return dict(zip(FIGURES, figures.tolist())), greedy


class ProbeMonitor:
    """The probe figures of a network over training (module docstring)."""

    def __init__(self, states: Any, device: torch.device | str, masks: Any = None, chunk: int = 256):
        """``states``: the probe set, [n, *input_shape] (numpy or torch); ``masks``: bool [n, A] or None."""
        if chunk < 1:
            raise ValueError(f"chunk={chunk!r} must be >= 1")
        self.device = torch.device(device)
        self.states = torch.as_tensor(np.asarray(states) if not isinstance(states, torch.Tensor) else states).to(self.device)
        if self.states.ndim < 2 or len(self.states) < 1:
            raise ValueError(f"states must be [n >= 1, *input_shape], got shape {tuple(self.states.shape)}")
        self.masks = None if masks is None else torch.as_tensor(np.asarray(masks, dtype=bool)).to(self.device)
        if self.masks is not None and (self.masks.ndim != 2 or len(self.masks) != len(self.states)):
            raise ValueError(f"masks must be bool [{len(self.states)}, A], got shape {tuple(self.masks.shape)}")
        self.chunk = int(chunk)
        self.greedy: torch.Tensor | None = None  # the greedy actions of the last observe

    def q_values(self, net: torch.nn.Module) -> torch.Tensor:
        """``net``'s Q at every probe state, fp32 [n, A], in eval mode without autocast; ``net``'s mode restored."""
        was_training = net.training
        net.eval()
        try:
            with torch.no_grad(), torch.autocast(self.device.type, enabled=False):
                parts = [net(self.states[i : i + self.chunk]).float() for i in range(0, len(self.states), self.chunk)]
        finally:
            net.train(was_training)
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def observe(self, net: torch.nn.Module) -> dict[str, float]:
        """The figures of ``net`` now (module docstring); churn against the previous call's greedy actions."""
        figures, self.greedy = probe_figures(self.q_values(net), self.masks, self.greedy)
        return figures
