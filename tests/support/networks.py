"""Networks for the tests: two Mario nets for the weight channel, BatchNorm statistics that are not the identity."""

import torch

from shared.network import QNetwork


def nets():
    """(learner's net, actor's net): two Mario Q-networks with different weights; the learner's also has non-default
    BatchNorm statistics, so a copy that skips buffers or scalars shows."""
    torch.manual_seed(0)
    learner_net = QNetwork(4, 7, 84)
    with torch.no_grad():
        learner_net.features[1].running_mean.add_(0.5)
        learner_net.features[1].num_batches_tracked.fill_(7)
    torch.manual_seed(1)
    return learner_net, QNetwork(4, 7, 84)


def randomise_batchnorm(net: torch.nn.Module, seed: int = 0) -> None:
    """Non-trivial running statistics and affine parameters, so eval mode is not the identity."""
    g = torch.Generator().manual_seed(seed)
    for m in net.modules():
        if isinstance(m, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d)):
            n = m.num_features
            m.running_mean.copy_(torch.randn(n, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(n, generator=g) + 0.5)
            with torch.no_grad():
                m.weight.copy_(torch.rand(n, generator=g) + 0.5)
                m.bias.copy_(torch.randn(n, generator=g) * 0.1)
