"""shared/network.py: the dueling head, and runs saved with the Nature-DQN head still loading."""

import json

import pytest
import torch

from actors.evaluator import build_network
from shared.config import EnvConfig, RunConfig
from shared.network import QNetwork, is_dueling


def test_dueling_q_is_value_plus_centred_advantage():
    torch.manual_seed(0)
    net = QNetwork(4, 7, 84).eval()
    obs = torch.randint(0, 256, (5, 4, 84, 84), dtype=torch.uint8)
    q = net(obs)
    assert q.shape == (5, 7) and q.dtype == torch.float32
    with torch.no_grad():
        x = net.features(obs.float() / 255.0)
        value, advantage = net.value(x), net.advantage(x)
    assert value.shape == (5, 1) and advantage.shape == (5, 7)
    torch.testing.assert_close(q, value + advantage - advantage.mean(1, keepdim=True))
    torch.testing.assert_close(q.mean(1, keepdim=True), value)  # the mean over actions is the state's value
    assert not hasattr(net, "head") and is_dueling(net.state_dict())


def test_nature_head_checkpoints_still_load_and_resume_as_such(tmp_path):
    old = QNetwork(4, 7, 84, dueling=False).eval()
    state = old.state_dict()
    assert not is_dueling(state) and not hasattr(old, "value")
    assert is_dueling({"_orig_mod." + k: v for k, v in QNetwork(4, 7, 84).state_dict().items()})
    loaded = build_network(EnvConfig(), state)  # the keys decide, not the default
    obs = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    torch.testing.assert_close(loaded(obs), old(obs))
    with pytest.raises(RuntimeError, match="Missing key"):
        QNetwork(4, 7, 84).load_state_dict(state)
    # a run folder written before the network options existed resumes with the Nature-DQN head
    from launch.local import resumed_config

    raw = json.loads(RunConfig().to_json())
    del raw["net"]
    (tmp_path / "config.json").write_text(json.dumps(raw))
    assert resumed_config(RunConfig(resume=str(tmp_path))).net.dueling is False
    raw["net"] = {"dueling": True}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    assert resumed_config(RunConfig(resume=str(tmp_path))).net.dueling is True
