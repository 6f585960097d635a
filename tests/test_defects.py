"""The defects that stopped Mario learning (issue 9), each pinned by a test that fails if it comes back."""

import numpy as np
import pytest
import torch

from learner.replay import FrameReplay
from learner.trainer import DQNLearner
from shared.config import ActorConfig, ConfigError, LearnerConfig
from shared.exploration import ExplorationHolds, epsilon_floors, epsilons, mean_floor
from shared.network import QNetwork

CPU = torch.device("cpu")


@pytest.mark.parametrize("dueling", [True, False])
def test_q_values_and_head_stay_fp32_under_bf16_autocast(dueling):
    net = QNetwork(4, 7, 84, dueling=dueling).eval()
    gaps = 0.5 * torch.arange(7.0)
    with torch.no_grad():  # Q near 800 with gaps of 0.5: bf16 (steps of 4 there) would tie them all
        if dueling:
            net.value[2].weight.zero_()
            net.value[2].bias.fill_(800.0)
            net.advantage[2].weight.zero_()
            net.advantage[2].bias.copy_(gaps)
            expected = 800.0 + gaps - gaps.mean()
        else:
            net.head[2].weight.zero_()
            net.head[2].bias.copy_(800.0 + gaps)
            expected = 800.0 + gaps
    obs = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        q = net(obs)
    assert q.dtype == torch.float32
    assert torch.equal(q[0], expected)
    assert q.argmax(dim=1).tolist() == [6, 6, 6]


@pytest.mark.parametrize("env,scale", [("mario", 1 / 15), ("catch", 1.0), ("fake", 1.0)])
def test_reward_scale_auto_per_env(env, scale):
    cfg = LearnerConfig().resolved("cpu", env)
    assert cfg.reward_scale == pytest.approx(scale)
    assert LearnerConfig(reward_scale=0.5).resolved("cpu", env).reward_scale == 0.5


def _batch(n=16, reward=30.0):
    obs = torch.randint(0, 256, (n, 4, 84, 84), dtype=torch.uint8)
    return {"obs": obs, "next_obs": torch.randint(0, 256, (n, 4, 84, 84), dtype=torch.uint8),
            "action": torch.randint(0, 7, (n,)), "reward": torch.full((n,), reward), "discount": torch.zeros(n)}


@pytest.mark.parametrize("batchnorm", ["joint", "split"])
def test_td_target_uses_the_scaled_reward(batchnorm):
    cfg = LearnerConfig(micro_batch=16, accum_steps=1, compile=False, amp="off", batchnorm=batchnorm)
    dqn = DQNLearner(cfg, 4, 7, 84, CPU, env_name="mario")
    batch = _batch()
    _, td, q = dqn.micro_loss(batch)  # discount 0: target = reward * scale = 2.0
    assert torch.allclose(td, (q - 2.0).abs(), atol=1e-5)


def test_joint_batchnorm_normalises_obs_and_next_obs_together():
    cfg = LearnerConfig(micro_batch=16, accum_steps=1, compile=False, amp="off", batchnorm="joint")
    dqn = DQNLearner(cfg, 4, 7, 84, CPU)
    batch = _batch()
    _, _, q = dqn.micro_loss(batch)
    dqn.online.train()
    with torch.no_grad():
        joint = dqn.online(torch.cat([batch["obs"], batch["next_obs"]]))[:16]
        alone = dqn.online(batch["obs"])
    taken = joint.gather(1, batch["action"].unsqueeze(1)).squeeze(1)
    assert torch.allclose(q, taken, atol=1e-4)  # Q(s, a) came from the joint forward ...
    assert not torch.allclose(q, alone.gather(1, batch["action"].unsqueeze(1)).squeeze(1), atol=1e-4)  # ... not obs alone


def test_exploration_anneals_from_one_to_each_envs_floor():
    cfg = ActorConfig(envs_per_actor=1, eps_anneal_steps=1000)  # one env per actor (the auto 0 is RunConfig's to resolve)
    floors = np.concatenate([epsilon_floors(cfg, 4, a) for a in range(4)])
    assert floors[0] == pytest.approx(0.4)
    assert floors[1] == floors[2] == floors[3] == pytest.approx(0.05)  # Ape-X gives 0.047, 0.0056, 0.00066: floored
    low = np.concatenate([epsilon_floors(ActorConfig(envs_per_actor=1, eps_min=0.01), 4, a) for a in range(4)])
    assert low[1] == pytest.approx(0.4 ** (1 + 7 / 3)) and low[2] == low[3] == pytest.approx(0.01)
    for a in range(4):
        assert epsilons(cfg, 4, a, 0) == pytest.approx(1.0)
        assert epsilons(cfg, 4, a, 500)[0] == pytest.approx((1 + floors[a]) / 2)
        assert epsilons(cfg, 4, a, 5000)[0] == pytest.approx(floors[a])
    assert mean_floor(cfg, 4) == pytest.approx(floors.mean())
    assert epsilons(ActorConfig(envs_per_actor=1, eps_anneal_steps=0, epsilon=0.2), 4, 3, 0)[0] == 0.2  # fixed
    assert epsilons(ActorConfig(envs_per_actor=1, eps_anneal_steps=0), 4, 0, 0)[0] == pytest.approx(0.4)


def test_learning_rate_decays_linearly_to_its_final_fraction():
    cfg = LearnerConfig(lr=2e-4, lr_final=0.1, lr_decay_steps=1000)
    assert cfg.lr_at(0) == pytest.approx(2e-4)
    assert cfg.lr_at(500) == pytest.approx(1.1e-4)
    assert cfg.lr_at(1000) == cfg.lr_at(10**9) == pytest.approx(2e-5)
    assert LearnerConfig(lr=2e-4, lr_decay_steps=0).lr_at(10**9) == 2e-4
    with pytest.raises(ConfigError, match="learner.lr_final=0"):
        LearnerConfig(lr_final=0).validate()


def test_exploration_holds_a_random_action_for_zipf_steps():
    rng = np.random.default_rng(0)
    holds = ExplorationHolds(ActorConfig(explore_repeat=2.0, explore_repeat_max=10), 2000, 7, rng)
    eps = np.ones(2000)
    first = holds.step(eps)
    assert first.all()  # epsilon 1: every env starts a hold at once
    lengths, actions = holds.left + 1, holds.action.copy()
    assert lengths.min() == 1 and lengths.max() == 10
    assert 0.55 < (lengths == 1).mean() < 0.67  # Zipf(2): P(n=1) = 1/zeta(2) = 0.61
    assert set(np.unique(actions)) == set(range(7))
    held = lengths > 1
    again = holds.step(np.zeros(2000))  # epsilon 0 now: only the envs still holding explore, with the same action
    assert np.array_equal(again, held) and np.array_equal(holds.action[held], actions[held])
    holds.clear(int(np.flatnonzero(held)[0]))
    assert holds.left[np.flatnonzero(held)[0]] == 0
    plain = ExplorationHolds(ActorConfig(explore_repeat=0.0), 1000, 7, rng)
    assert plain.step(np.ones(1000)).all() and (plain.left == 0).all()  # off: one step per random action
    assert not plain.step(np.zeros(1000)).any()


def _add(replay, stream, t, first_slot=False):
    frames = np.full((1, t, 8, 8), stream, np.uint8)
    first = np.zeros((1, t), bool)
    first[0, 0] = first_slot
    replay.add(stream, frames, np.zeros((1, t), np.uint8), np.ones((1, t), np.float32), np.zeros((1, t), bool), first)


def test_a_dead_streams_data_expires_after_a_capacity_of_newer_data():
    replay = FrameReplay(num_streams=2, capacity=200, frame_shape=(8, 8), stack=2, n_step=1)
    _add(replay, 0, 50, True)
    _add(replay, 1, 50, True)
    assert replay.live_streams() == 2
    for _ in range(4):  # 200 more slots into stream 1 only: stream 0 is now older than a FIFO of 200 would hold
        _add(replay, 1, 50)
    assert replay.live_streams() == 1
    streams = replay.sample(512, generator=torch.Generator().manual_seed(0))["stream"]
    assert set(streams.tolist()) == {1}
    _add(replay, 0, 10)  # the slot's actor is back: its stream is sampled again
    assert replay.live_streams() == 2
    streams = replay.sample(2048, generator=torch.Generator().manual_seed(0))["stream"]
    assert set(streams.tolist()) == {0, 1}


def test_eval_batchnorm_trains_the_function_the_actors_play():
    cfg = LearnerConfig(micro_batch=16, accum_steps=1, compile=False, amp="off", batchnorm="eval")
    dqn = DQNLearner(cfg, 4, 7, 84, CPU)
    batch = _batch()
    before = dqn.online.features[1].running_mean.clone()
    _, _, q = dqn.micro_loss(batch)
    assert not torch.equal(before, dqn.online.features[1].running_mean)  # the train-mode pass moved the statistics
    dqn.online.eval()  # what an actor runs, with the statistics the learner just used
    with torch.no_grad():
        played = dqn.online(batch["obs"]).gather(1, batch["action"].unsqueeze(1)).squeeze(1)
    assert torch.allclose(q, played, atol=1e-5)
