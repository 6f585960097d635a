"""The ensemble of kept weights (shared/ensemble.py): its Q is the members' mean, its action that mean's argmax."""

import pytest
import torch
from torch import nn

from shared.ensemble import MeanQ


class Fixed(nn.Module):
    """A stand-in Q-network that returns the same Q-values for every state."""

    def __init__(self, q: list[float]) -> None:
        super().__init__()
        self.q = torch.tensor(q)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.q.expand(x.shape[0], -1)


def test_action_is_the_argmax_of_the_mean_not_of_any_member():
    a, b = Fixed([1.0, 0.0, 0.9]), Fixed([0.0, 1.0, 0.9])  # members pick 0 and 1; the mean [0.5, 0.5, 0.9] picks 2
    q = MeanQ([a, b])(torch.zeros(3, 4))
    assert q.shape == (3, 3)
    assert torch.equal(q[0], torch.tensor([0.5, 0.5, 0.9]))
    assert q.argmax(dim=1).tolist() == [2, 2, 2]


def test_mean_of_real_networks_matches_by_hand():
    torch.manual_seed(0)
    nets = [nn.Sequential(nn.Flatten(), nn.Linear(8, 5)).eval() for _ in range(4)]
    x = torch.randn(6, 2, 4)
    expected = (nets[0](x) + nets[1](x) + nets[2](x) + nets[3](x)) / 4
    assert torch.allclose(MeanQ(nets)(x), expected, atol=1e-6)


def test_no_members_is_an_error():
    with pytest.raises(ValueError, match="got 0"):
        MeanQ([])
