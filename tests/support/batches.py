"""Synthetic replay batches for the learner's unit tests: random frames, actions, rewards and discounts."""

import torch

SIZE, STACK, ACTIONS = 42, 4, 3  # small frames, Mario's stack, three actions


def synthetic_batch(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {
        "obs": torch.randint(0, 256, (n, STACK, SIZE, SIZE), dtype=torch.uint8, generator=g),
        "next_obs": torch.randint(0, 256, (n, STACK, SIZE, SIZE), dtype=torch.uint8, generator=g),
        "action": torch.randint(0, ACTIONS, (n,), generator=g),
        "reward": torch.randn(n, generator=g),
        "discount": torch.where(torch.rand(n, generator=g) < 0.2, 0.0, 0.99**3),
    }
