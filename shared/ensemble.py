"""The mean of several Q-networks' values as one network: its argmax is the ensemble's action (issue 66, lever 1)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


class MeanQ(nn.Module):
    """Q(s, .) = the mean of ``members``' Q(s, .), each network as given (eval mode for acting); the played action is
    its argmax, so a near-tie that one member's small weight change would flip needs the others to agree."""

    def __init__(self, members: Sequence[nn.Module]) -> None:
        super().__init__()
        if not members:
            raise ValueError("MeanQ needs at least one network, got 0")
        self.members = nn.ModuleList(members)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([m(x) for m in self.members]).mean(dim=0)
