"""The Q-network: Nature-DQN convolutions with BatchNorm (seed 003).

Convolutions carry no bias (BatchNorm's shift replaces it), ReLUs are in
place, weights use He (Kaiming) initialisation for ReLU. The input is the
uint8 frame stack [B, stack, H, W]; scaling to [0, 1] happens inside the
network so uint8 is what travels and what replay stores.

Head: dueling by default (``value`` and ``advantage`` streams, Q = V + A - mean A, Wang et al.
2016), or the Nature-DQN ``head`` with ``dueling=False``.

BatchNorm modes: actors always run the network in ``eval()`` mode (running
statistics, deterministic, works for a batch of one env).

Precision: under mixed precision (autocast bf16/fp16) the convolutions run in
the low precision, but the head (both linear layers) always runs in fp32 and
the Q-values it returns are fp32. bf16 keeps 8 bits of mantissa: Q = 800 would
be rounded to steps of 4, so near-equal action values would tie and argmax
would favour the lowest index.
"""

from __future__ import annotations

import torch
from torch import nn


def _conv_out(size: int, kernel: int, stride: int) -> int:
    return (size - kernel) // stride + 1


class QNetwork(nn.Module):
    """Maps uint8 stacks [B, C, H, W] to Q-values [B, num_actions]."""

    def __init__(self, in_channels: int, num_actions: int, frame_size: int = 84, dueling: bool = True):
        super().__init__()
        self.dueling = dueling
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 32, kernel_size=8, stride=4, bias=False),
            nn.BatchNorm2d(32),
            nn.ReLU(inplace=True),
            nn.Conv2d(32, 64, kernel_size=4, stride=2, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(inplace=True),
            nn.Conv2d(64, 64, kernel_size=3, stride=1, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(inplace=True),
            nn.Flatten(),
        )
        side = _conv_out(_conv_out(_conv_out(frame_size, 8, 4), 4, 2), 3, 1)

        def mlp(outputs: int) -> nn.Sequential:
            return nn.Sequential(nn.Linear(64 * side * side, 512), nn.ReLU(inplace=True), nn.Linear(512, outputs))

        if dueling:
            self.value, self.advantage = mlp(1), mlp(num_actions)
        else:
            self.head = mlp(num_actions)
        for module in self.modules():
            if isinstance(module, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(module.weight, nonlinearity="relu")
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = self.features(obs.float() / 255.0)
        with torch.autocast(x.device.type, enabled=False):  # the head and the Q-values in fp32, always
            x = x.float()
            if not self.dueling:
                return self.head(x)
            advantage = self.advantage(x)
            return self.value(x) + advantage - advantage.mean(dim=1, keepdim=True)


def is_dueling(state_dict: dict) -> bool:
    """Whether a saved state dict (plain or ``torch.compile``'d keys) holds a dueling head."""
    return any(k.removeprefix("_orig_mod.").startswith("advantage.") for k in state_dict)
