"""A reset changes exactly the parameters it names, and their optimizer state."""

import copy

import pytest
import torch
from torch import nn

from learner.resets import fresh_copy, head_parameter_names, reset_network
from shared.network import QNetwork


def _trained(dueling: bool = True) -> tuple[QNetwork, torch.optim.Adam]:
    torch.manual_seed(0)
    net = QNetwork(4, 7, dueling=dueling)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    for _ in range(2):  # Adam state for every parameter, BatchNorm statistics away from their start
        net.train()
        loss = net(torch.randint(0, 256, (8, 4, 84, 84), dtype=torch.uint8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return net.eval(), opt


@pytest.mark.parametrize("dueling", [True, False])
def test_reset_reinitializes_the_head_and_shrinks_the_rest(dueling):
    net, opt = _trained(dueling)
    before = {k: v.clone() for k, v in net.named_parameters()}
    state_before = {k: {s: t.clone() for s, t in opt.state[p].items()} for k, p in net.named_parameters()}
    buffers_before = {k: v.clone() for k, v in net.named_buffers()}
    torch.manual_seed(5)
    fresh = fresh_copy(net)
    theta0 = {k: v.clone() for k, v in fresh.named_parameters()}
    counts = reset_network(net, opt, shrink=0.8, fresh=fresh)
    head = head_parameter_names(net)
    assert head == {k for k in before if k.split(".")[0] in (("value", "advantage") if dueling else ("head",))}
    assert counts == {"reinitialized": len(head), "shrunk": len(before) - len(head)}
    for name, param in net.named_parameters():
        if name in head:
            assert torch.equal(param, theta0[name]), name
            assert not torch.equal(param, before[name]), name
            assert all(not t.any() for t in opt.state[param].values()), f"{name}: Adam state not zeroed"
        else:
            assert torch.allclose(param, 0.8 * before[name] + 0.2 * theta0[name], atol=1e-7), name
            assert all(torch.equal(t, state_before[name][s]) for s, t in opt.state[param].items()), name
    for name, buf in net.named_buffers():  # no frames given: BatchNorm's statistics stay
        assert torch.equal(buf, buffers_before[name]), name
    bn = [m for m in fresh.modules() if isinstance(m, nn.BatchNorm2d)]
    assert bn and all(bool((m.weight == 1).all()) and not m.bias.any() for m in bn)


def test_reset_reestimates_batchnorm_statistics_on_the_frames_given():
    net, opt = _trained()
    frames = torch.randint(0, 256, (16, 4, 84, 84), dtype=torch.uint8)
    reset_network(net, opt, shrink=0.8, frames=[frames])
    assert not net.training
    reference = copy.deepcopy(net).train()  # one batch: the statistics are that batch's (momentum 1 sets them)
    for m in reference.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.momentum = 1.0
    with torch.no_grad():
        reference(frames)
    for (name, ours), theirs in zip(net.named_buffers(), reference.buffers()):
        if "running" in name:
            assert torch.allclose(ours, theirs, rtol=1e-4, atol=1e-5), name


def test_bad_shrink_is_named():
    net, opt = _trained()
    with pytest.raises(ValueError, match="shrink 1.5"):
        reset_network(net, opt, shrink=1.5)
