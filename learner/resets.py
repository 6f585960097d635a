"""Periodic resets of the Q-network (Nikishin et al. 2022; SR-SPR, D'Oro et al. 2023; BBF, Schwarzer et al. 2023).

A reset re-initializes the head, shrinks the rest toward a fresh draw (theta <- alpha * theta + (1 - alpha) * theta0),
zeroes the head's Adam state and re-estimates BatchNorm's statistics on replay frames; the caller syncs the target net.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

import torch
from torch import nn
from torch.optim.swa_utils import update_bn

from shared.network import init_weights

HEAD_STREAMS = ("value", "advantage", "head")  # a Q-network's head attributes (shared/network.py): re-initialized


def head_parameter_names(net: nn.Module) -> set[str]:
    """Names (as ``named_parameters`` gives them) of the head's parameters; every other parameter is shrunk."""
    names = {name for name, _ in net.named_parameters() if name.split(".", 1)[0] in HEAD_STREAMS}
    if not names:
        raise ValueError(f"{type(net).__name__} has none of the head streams {HEAD_STREAMS}")
    return names


def fresh_copy(net: nn.Module) -> nn.Module:
    """A copy of ``net`` with every parameter drawn anew as at construction (BatchNorm: scale 1, shift 0)."""
    fresh = copy.deepcopy(net)
    init_weights(fresh)
    for module in fresh.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.reset_parameters()  # scale 1, shift 0 (and fresh statistics, which a reset does not take)
    return fresh


@torch.no_grad()
def reset_network(
    net: nn.Module,
    optimizer: torch.optim.Optimizer,
    shrink: float,
    frames: Iterable[torch.Tensor] = (),
    fresh: nn.Module | None = None,
) -> dict[str, int]:
    """Reset ``net`` in place (module docstring; ``shrink``: alpha, ``frames``: for BatchNorm); the tensors' counts."""
    if not 0.0 <= shrink <= 1.0:
        raise ValueError(f"shrink {shrink!r} must be in [0, 1]")
    fresh = fresh_copy(net) if fresh is None else fresh
    head = head_parameter_names(net)
    new = dict(fresh.named_parameters())
    for name, param in net.named_parameters():
        if name in head:
            param.copy_(new[name])
            for value in optimizer.state.get(param, {}).values():
                if isinstance(value, torch.Tensor):
                    value.zero_()  # in place: fused Adam's step and moments keep their storage
        else:
            param.mul_(shrink).add_(new[name], alpha=1.0 - shrink)
    frames = list(frames)
    if frames:
        update_bn(frames, net)  # resets the statistics, averages them over ``frames``, restores net's mode
    return {"reinitialized": len(head), "shrunk": len(new) - len(head)}
