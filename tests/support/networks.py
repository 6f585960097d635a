"""Networks for the weight-channel tests."""

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
