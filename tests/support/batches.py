"""Synthetic replay batches for the learner's tests: random frames, actions, rewards and discounts, and their split
into micro-batches."""

import torch

SIZE, STACK, ACTIONS = 42, 4, 3  # small frames, Mario's stack, three actions


def synthetic_batch(n, seed=0, size=SIZE, actions=ACTIONS, device=None):
    """``n`` random samples of ``size`` x ``size`` frames and ``actions`` actions, drawn on the CPU and moved to
    ``device`` when given."""
    g = torch.Generator().manual_seed(seed)
    batch = {
        "obs": torch.randint(0, 256, (n, STACK, size, size), dtype=torch.uint8, generator=g),
        "next_obs": torch.randint(0, 256, (n, STACK, size, size), dtype=torch.uint8, generator=g),
        "action": torch.randint(0, actions, (n,), generator=g),
        "reward": torch.randn(n, generator=g),
        "discount": torch.where(torch.rand(n, generator=g) < 0.2, 0.0, 0.99**3),
    }
    return batch if device is None else {k: v.to(device) for k, v in batch.items()}


def split(batch, parts):
    """``batch`` cut into ``parts`` equal micro-batches, in order."""
    n = batch["obs"].shape[0] // parts
    return [{k: v[i * n : (i + 1) * n] for k, v in batch.items()} for i in range(parts)]
