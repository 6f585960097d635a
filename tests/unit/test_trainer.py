"""The DQN update on CPU: accumulation equals one big batch, AMP and compiled paths, atomic checkpoints."""

import copy
import dataclasses
import os
from types import SimpleNamespace

import pytest
import torch

from learner.checkpoint import CHECKPOINT_NAME, load_checkpoint, save_checkpoint
from learner.trainer import DQNLearner
from shared.config import LearnerConfig
from shared.resolution import learner_config, resolve_config
from shared.spec import EnvSpec
from shared.targets import Munchausen
from tests.support.batches import ACTIONS, SIZE, STACK, split, synthetic_batch

SPEC = EnvSpec((SIZE, SIZE), "uint8", STACK, ACTIONS)
MARIO = EnvSpec((84, 84), "uint8", 4, 7)
CPU = torch.device("cpu")


def learner(cfg, **kw):
    return DQNLearner(learner_config(cfg), SPEC, CPU, **kw)


def params(net):
    return {k: v.detach().clone() for k, v in net.state_dict().items()}


def test_accumulated_micro_batches_equal_one_concatenated_batch():
    base = LearnerConfig(micro_batch=16, accum_steps=4, compile=False, amp="off", lr=1e-3, max_grad_norm=0)
    accumulated = learner(base, batchnorm_batch_stats=False)  # BN on running statistics: exact equality holds
    single = learner(dataclasses.replace(base, micro_batch=64, accum_steps=1), batchnorm_batch_stats=False)
    single.online.load_state_dict(accumulated.online.state_dict())
    single.target.load_state_dict(accumulated.target.state_dict())
    before = params(accumulated.online)
    batch = synthetic_batch(64)
    stats_a = accumulated.update(None, split(batch, 4))
    stats_b = single.update(None, [batch])
    for (name, p_a), p_b in zip(accumulated.online.named_parameters(), single.online.parameters()):
        assert torch.allclose(p_a.grad, p_b.grad, rtol=1e-4, atol=1e-7), name
    after_a, after_b = params(accumulated.online), params(single.online)
    assert any(not torch.equal(before[k], after_a[k]) for k in before)  # the update did something
    for name in after_a:
        assert torch.allclose(after_a[name], after_b[name], rtol=1e-5, atol=1e-6), name
    assert stats_a.loss == pytest.approx(stats_b.loss, rel=1e-5)


def test_micro_losses_are_divided_by_the_number_of_steps():
    """Guards the test above: without the division the same micro-steps give 4x the gradient."""
    base = LearnerConfig(micro_batch=16, accum_steps=4, compile=False, amp="off", max_grad_norm=0, lr=1e-12)
    dqn = learner(base, batchnorm_batch_stats=False)
    micro = split(synthetic_batch(64), 4)
    dqn.update(None, micro)
    scaled = [p.grad.clone() for p in dqn.online.parameters()]
    dqn.optimizer.zero_grad()
    for m in micro:
        dqn.micro_loss(m)[0].backward()
    unscaled = [p.grad for p in dqn.online.parameters()]
    assert all(torch.allclose(u, 4 * g, rtol=1e-3, atol=1e-6) for u, g in zip(unscaled, scaled))


@pytest.mark.parametrize("amp", ["bf16", "fp16"])
def test_amp_update_on_cpu(amp):
    cfg = LearnerConfig(micro_batch=32, accum_steps=2, compile=False, amp=amp)
    dqn = learner(cfg)
    assert dqn.amp_dtype == (torch.bfloat16 if amp == "bf16" else torch.float16)
    assert dqn.scaler.is_enabled() == (amp == "fp16")
    before = params(dqn.online)
    stats = [dqn.update(None, split(synthetic_batch(64, seed=i), 2)) for i in range(3)]
    assert all(torch.isfinite(torch.tensor([s.loss, s.td_error, s.grad_norm])).all() for s in stats)
    after = params(dqn.online)
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert {"features.0.weight", "value.2.weight", "advantage.2.weight"} <= set(changed)
    assert all(p.dtype == torch.float32 for p in dqn.online.parameters())  # master weights stay fp32


def test_auto_amp_is_full_precision_the_function_actors_play():
    from learner.trainer import resolve_amp

    assert learner(LearnerConfig(compile=False)).amp_dtype is None  # on every CPU, native bf16 or not
    assert learner(LearnerConfig(compile=False, amp="off")).amp_dtype is None
    assert resolve_amp("auto", torch.device("cuda")) is None  # no GPU needed: the rule, not the device
    assert resolve_amp("bf16", torch.device("cpu")) == torch.bfloat16


@pytest.mark.slow
@pytest.mark.parametrize("accum", [1, 4])
def test_compiled_update_matches_eager(accum):
    torch._dynamo.reset()  # every learner compiles QNetwork.forward: stay clear of the recompile limit
    cfg = LearnerConfig(micro_batch=16, accum_steps=accum, compile=True, amp="off", lr=1e-3)
    compiled = learner(cfg)
    eager = learner(dataclasses.replace(cfg, compile=False))
    eager.online.load_state_dict(compiled.online.state_dict())
    eager.target.load_state_dict(compiled.target.state_dict())
    grads = [p.grad for p in compiled.online.parameters()]
    seconds = compiled.warm_up(_Sampler())
    assert seconds > 0
    assert all(
        torch.equal(a, b) for a, b in zip(compiled.online.state_dict().values(), eager.online.state_dict().values())
    )  # warm-up changed nothing
    for i in range(2):
        batches = split(synthetic_batch(16 * accum, seed=10 + i), accum)
        s_c, s_e = compiled.update(None, batches), eager.update(None, batches)
        assert s_c.loss == pytest.approx(s_e.loss, rel=1e-3, abs=1e-5)
    for (name, a), b in zip(compiled.online.state_dict().items(), eager.online.state_dict().values(), strict=True):
        assert torch.allclose(a.float(), b.float(), rtol=1e-3, atol=1e-4), name
    assert all(p.grad is g for p, g in zip(compiled.online.parameters(), grads, strict=True))  # the same buffers


def mario_batches(n, seed):
    g = torch.Generator().manual_seed(seed)
    return {
        "obs": torch.randint(0, 256, (n, 4, 84, 84), dtype=torch.uint8, generator=g),
        "next_obs": torch.randint(0, 256, (n, 4, 84, 84), dtype=torch.uint8, generator=g),
        "action": torch.randint(0, 7, (n,), generator=g),
        "reward": 30 * torch.randn(n, generator=g),
        "discount": torch.where(torch.rand(n, generator=g) < 0.2, 0.0, 0.9**3),
    }


@pytest.mark.slow
def test_compiled_bf16_update_on_cpu_gives_eagers_gradients():
    """Mario's 84x84 network, compiled under bf16 autocast on the CPU, as the learner runs it on a CPU with native
    bf16. torch 2.13's inductor, generating 512-bit vector code on an Intel Xeon with AMX, gave non-finite gradients
    in the head's first layers here (and every Catch, Snake and benchmark run stopped at its first updates); the
    learner has it generate 256-bit code (learner/trainer.py). Each tensor's gradient must be finite and within bf16
    rounding of eager's (relative error of the norm; the compiled backward computes the head's gradient in bf16,
    eager in fp32), update after update."""
    torch._dynamo.reset()
    cfg = LearnerConfig(micro_batch=64, accum_steps=1, compile=True, amp="bf16", lr=1e-3)
    compiled = DQNLearner(learner_config(cfg, "mario"), MARIO, CPU)
    eager = DQNLearner(learner_config(dataclasses.replace(cfg, compile=False), "mario"), MARIO, CPU)
    eager.load_state_dict(compiled.state_dict())
    for i in range(3):
        batch = mario_batches(64, seed=30 + i)
        s_c, s_e = compiled.update(None, [batch]), eager.update(None, [batch])  # NonFiniteUpdate if not finite
        assert s_c.loss == pytest.approx(s_e.loss, rel=0.05), i
        for (name, a), b in zip(compiled.online.named_parameters(), eager.online.parameters(), strict=True):
            assert torch.isfinite(a.grad).all(), (i, name)
            error = ((a.grad - b.grad).norm() / b.grad.norm()).item()  # measured: at most 0.043 (advantage.0)
            assert error <= 0.1, (i, name, error)
        eager.load_state_dict(compiled.state_dict())  # the next update starts both from the same weights


def test_a_non_finite_update_stops_before_the_step_and_names_its_values():
    """A NaN in the loss (here a NaN reward) raises NonFiniteUpdate naming the update and the figures; the optimizer
    step is not taken, so the weights, Adam's state and the update count are those of the last good update."""
    from learner.trainer import NonFiniteUpdate

    dqn = learner(LearnerConfig(micro_batch=16, accum_steps=2, compile=False, amp="off"))
    dqn.update(None, split(synthetic_batch(32), 2))
    weights = lambda: {k: v.detach().clone() for k, v in dqn.online.named_parameters()}  # noqa: E731
    before, adam = weights(), copy.deepcopy(dqn.optimizer.state_dict())
    bad = synthetic_batch(32, seed=1)
    bad["reward"][3] = float("nan")
    with pytest.raises(
        NonFiniteUpdate,
        match=r"update 2 is not finite: loss nan, .* gradient norm nan "
        r"\(full precision, eager, on cpu, .*weights are those of update 1\b",
    ):
        dqn.update(None, split(bad, 2))
    assert dqn.updates == 1
    after = weights()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert all(
        torch.equal(adam["state"][k]["exp_avg"], v["exp_avg"]) and int(v["step"]) == 1
        for k, v in dqn.optimizer.state_dict()["state"].items()
    )
    assert all(torch.isfinite(v).all() for v in after.values())


def test_gradients_live_in_buffers_allocated_once_and_zeroed_in_place():
    """Each update accumulates into the .grad tensors allocated with the learner (under CUDA graphs a .grad left to
    autograd would be a graph output, overwritten by the next micro-step), and starts them from zero."""
    cfg = LearnerConfig(micro_batch=8, accum_steps=4, compile=False, amp="off", lr=1e-3, max_grad_norm=0)
    dqn = learner(cfg, batchnorm_batch_stats=False)  # BN on running statistics: micro_loss has no side effects
    params_ = list(dqn.online.parameters())
    grads = [p.grad for p in params_]
    assert all(g is not None and not g.any() for g in grads)
    pointers = [g.data_ptr() for g in grads]
    for i in range(3):
        micro = split(synthetic_batch(32, seed=20 + i), 4)
        want = torch.autograd.grad(sum(dqn.micro_loss(m)[0] for m in micro) / 4, params_)  # never touches .grad
        dqn.update(None, micro)
        for p, g, ptr, w in zip(params_, grads, pointers, want, strict=True):
            assert p.grad is g and p.grad.data_ptr() == ptr
            assert torch.allclose(p.grad, w, rtol=1e-4, atol=1e-7)  # not added to the previous update's


def test_resume_reads_the_checkpoint_to_the_cpu(tmp_path, monkeypatch):
    """On CUDA a checkpoint read onto the GPU would leave non-fused Adam's step there (one sync per parameter and
    update); load_resume_state reads to the CPU and lets load_state_dict place each tensor."""
    from learner.checkpoint import load_resume_state

    dqn = learner(LearnerConfig(micro_batch=16, accum_steps=1, compile=False))
    dqn.update(None, [synthetic_batch(16)])
    save_checkpoint(str(tmp_path), {"learner": dqn.state_dict(), "counters": {"epoch": 1}, "config": "{}"})
    seen, real_load = [], torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **kw: seen.append(kw.get("map_location")) or real_load(*a, **kw))
    state = load_resume_state(str(tmp_path))
    assert seen == ["cpu"]
    assert state["counters"]["epoch"] == 1


def test_a_cpu_learners_adam_is_fused_except_beside_an_fp16_scaler():
    """Fused Adam (one kernel) is about 8x faster than the multi-tensor step on a CPU; torch's CPU GradScaler path is
    left on the default optimizer."""
    for amp in ("off", "bf16"):
        dqn = learner(LearnerConfig(micro_batch=16, accum_steps=1, compile=False, amp=amp))
        assert all(g["fused"] for g in dqn.optimizer.param_groups), amp
    dqn = learner(LearnerConfig(micro_batch=16, accum_steps=1, compile=False, amp="fp16"))
    assert dqn.scaler.is_enabled() and not any(g["fused"] for g in dqn.optimizer.param_groups)


@pytest.mark.parametrize("saved_fused", [True, None])
def test_loading_keeps_this_devices_fused_adam_setting(saved_fused):
    """A checkpoint's param groups say whether it came from a fused Adam (today's, on CPU and CUDA) or the
    multi-tensor one (older CPU runs); the loading learner keeps its own choice, and Adam's step follows it (torch: on
    the parameter's device when fused, else as loaded)."""
    source = learner(LearnerConfig(micro_batch=16, accum_steps=1, compile=False))
    source.update(None, [synthetic_batch(16)])
    state = source.state_dict()
    state["optimizer"] = dict(
        state["optimizer"], param_groups=[dict(g, fused=saved_fused) for g in state["optimizer"]["param_groups"]]
    )
    dest = learner(LearnerConfig(micro_batch=16, accum_steps=1, compile=False, seed=5))
    own_fused = not saved_fused  # the other kind than the checkpoint's
    dest.optimizer = torch.optim.Adam(dest.online.parameters(), lr=dest.cfg.lr, eps=dest.cfg.adam_eps, fused=own_fused or None)
    dest.load_state_dict(state)
    assert all(bool(g["fused"]) == own_fused for g in dest.optimizer.param_groups)
    for p, q in zip(dest.online.parameters(), source.online.parameters(), strict=True):
        st = dest.optimizer.state[p]
        assert st["exp_avg"].device == p.device and st["step"].device == CPU and st["step"].dtype == torch.float32
        assert torch.equal(st["exp_avg"], source.optimizer.state[q]["exp_avg"])
    dest.update(None, [synthetic_batch(16, seed=1)])  # and it steps
    assert all(int(dest.optimizer.state[p]["step"]) == 2 for p in dest.online.parameters())


class _Sampler:
    def sample(self, n):
        return synthetic_batch(n, seed=99)


def test_target_sync_copies_parameters_and_batchnorm_buffers():
    dqn = learner(LearnerConfig(micro_batch=32, accum_steps=1, compile=False))
    dqn.update(None, [synthetic_batch(32)])  # an update never syncs: the loop's period in env steps does
    assert not torch.equal(dqn.online.features[1].running_mean, dqn.target.features[1].running_mean)
    dqn.sync_target()
    for (name, a), b in zip(dqn.online.state_dict().items(), dqn.target.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_reset_zeroes_the_heads_adam_state_and_syncs_the_target():
    dqn = learner(LearnerConfig(micro_batch=32, accum_steps=1, compile=False))
    dqn.update(None, [synthetic_batch(32)])
    conv = dqn.online.features[0].weight
    conv_moment = dqn.optimizer.state[conv]["exp_avg"].clone()
    counts = dqn.reset(SimpleNamespace(sample=lambda n: synthetic_batch(n, seed=1)), batches=1)
    assert counts["reinitialized"] == 8  # value and advantage: two Linear layers each, weight and bias
    assert all(not t.any() for p in dqn.online.advantage.parameters() for t in dqn.optimizer.state[p].values())
    assert torch.equal(dqn.optimizer.state[conv]["exp_avg"], conv_moment)
    for (name, a), b in zip(dqn.online.state_dict().items(), dqn.target.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    dqn.update(None, [synthetic_batch(32, seed=2)])  # Adam restarts the head from step 0
    assert int(dqn.optimizer.state[next(dqn.online.advantage.parameters())]["step"]) == 1


def test_a_checkpoint_with_a_moving_average_loads_and_the_average_is_ignored():
    """Checkpoints of runs that kept the retired moving average (``ema``, ``ema_averaged``) still resume."""
    dqn = learner(LearnerConfig(micro_batch=32, accum_steps=1, compile=False))
    dqn.update(None, [synthetic_batch(32)])
    state = dqn.state_dict()
    assert "ema" not in state
    other = learner(LearnerConfig(micro_batch=32, accum_steps=1, compile=False, seed=3))
    other.load_state_dict({**state, "ema": params(other.online), "ema_averaged": 7})
    for (name, a), b in zip(dqn.online.state_dict().items(), other.online.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    assert other.updates == 1 and "ema" not in other.state_dict()


def test_checkpoint_is_atomic_and_loads_with_weights_only(tmp_path):
    dqn = learner(LearnerConfig(micro_batch=32, accum_steps=1, compile=False))
    dqn.update(None, [synthetic_batch(32)])
    save_checkpoint(str(tmp_path), {"learner": dqn.state_dict(), "counters": {"epoch": 3}, "config": "{}"})
    (tmp_path / f"{CHECKPOINT_NAME}.tmp-12345").write_bytes(b"partial garbage from a crash")  # never read
    state = load_checkpoint(str(tmp_path))
    assert state["counters"]["epoch"] == 3
    other = learner(LearnerConfig(micro_batch=32, accum_steps=1, compile=False, seed=7))
    other.load_state_dict(state["learner"])
    for (name, a), b in zip(dqn.online.state_dict().items(), other.online.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    assert other.updates == 1
    assert other.optimizer.state_dict()["state"][0]["step"] == dqn.optimizer.state_dict()["state"][0]["step"]
    with pytest.raises(FileNotFoundError, match="no checkpoint.pt"):
        load_checkpoint(str(tmp_path / "missing"))
    assert sorted(os.listdir(tmp_path)) == [CHECKPOINT_NAME, f"{CHECKPOINT_NAME}.tmp-12345"]


def test_importance_weights_scale_each_sample_in_the_loss():
    dqn = learner(LearnerConfig(micro_batch=32, compile=False, amp="off"), batchnorm_batch_stats=False)
    batch = synthetic_batch(32)
    plain, td, _ = dqn.micro_loss(batch)
    weight = torch.linspace(0.1, 1.0, 32)
    weighted, td_w, _ = dqn.micro_loss(dict(batch, weight=weight))
    per_sample = torch.where(td < 1.0, 0.5 * td**2, td - 0.5)  # Huber (smooth L1, beta 1) of each TD error
    assert torch.allclose(td, td_w)
    assert plain.item() == pytest.approx(per_sample.mean().item(), rel=1e-5)
    assert weighted.item() == pytest.approx((weight * per_sample).mean().item(), rel=1e-5)
    assert dqn.micro_loss(dict(batch, weight=torch.ones(32)))[0].item() == pytest.approx(plain.item(), rel=1e-6)


def test_update_writes_the_new_td_errors_back_as_priorities():
    import numpy as np

    from learner.replay.prioritized import PrioritizedReplay

    replay = PrioritizedReplay(2, 512, frame_shape=(SIZE, SIZE), stack=STACK, n_step=3, gamma=0.9, alpha=1.0, eps=1e-3)
    rng = np.random.default_rng(0)
    for stream in (0, 1):
        first = np.zeros((1, 200), bool)
        first[0, 0] = True
        replay.add(
            stream,
            rng.integers(0, 256, (1, 200, SIZE, SIZE), dtype=np.uint8),
            rng.integers(0, ACTIONS, (1, 200)).astype(np.uint8),
            rng.normal(size=(1, 200)).astype(np.float32),
            np.zeros((1, 200), bool),
            first,
        )
    dqn = learner(LearnerConfig(micro_batch=16, accum_steps=2, compile=False, amp="off", lr=1e-12))
    replay.beta = 0.7
    seen = []
    original = replay.update_priorities
    replay.update_priorities = lambda s, i, td: seen.append((s.copy(), i.copy(), td.copy())) or original(s, i, td)
    dqn.update(replay)
    assert len(seen) == 1  # one vectorized call for both micro-batches, on host arrays
    stream, slot, td = seen[0]
    assert stream.shape == slot.shape == td.shape == (32,)
    leaf = stream * replay.stream_capacity + slot % replay.stream_capacity
    last = {int(k): float(v) for k, v in zip(leaf, td)}  # a slot drawn twice keeps its last TD error
    np.testing.assert_allclose(replay._prio[list(last)], np.array(list(last.values())) + 1e-3, rtol=1e-6)


def test_masked_double_dqn_target_takes_the_best_valid_action():
    """With next_mask the Double-DQN argmax is over s''s valid actions only (fuel-break spec, one Q per cell)."""
    from shared.network import CellQNetwork
    from shared.spec import EnvSpec

    spec = EnvSpec((3, 8, 8), "uint8", 1, 64, masked=True)
    cfg = LearnerConfig(micro_batch=8, accum_steps=1, compile=False, amp="off")
    dqn = DQNLearner(learner_config(cfg), spec, CPU, batchnorm_batch_stats=False)
    assert isinstance(dqn.online, CellQNetwork)
    g = torch.Generator().manual_seed(0)
    batch = {
        "obs": torch.randint(0, 256, (8, 3, 8, 8), dtype=torch.uint8, generator=g),
        "next_obs": torch.randint(0, 256, (8, 3, 8, 8), dtype=torch.uint8, generator=g),
        "action": torch.randint(0, 64, (8,), generator=g),
        "reward": torch.zeros(8),
        "discount": torch.ones(8),
    }
    dqn.online.eval()
    with torch.no_grad():
        q_online, q_target = dqn.online(batch["next_obs"]), dqn.target(batch["next_obs"])
    mask = torch.ones(8, 64, dtype=torch.bool)
    mask[torch.arange(8), q_online.argmax(1)] = False  # the unmasked argmax is invalid in every row
    mask[:, 5] = False
    want_action = q_online.masked_fill(~mask, float("-inf")).argmax(1)
    assert not torch.equal(want_action, q_online.argmax(1))
    loss, td, q = dqn.micro_loss(dict(batch, next_mask=mask))
    target = q_target.gather(1, want_action[:, None]).squeeze(1)
    assert torch.allclose(td, (q - target).abs(), atol=1e-5)
    _, td_unmasked, _ = dqn.micro_loss(batch)
    assert not torch.allclose(td, td_unmasked)


def learner_on_running_statistics(**options):
    """A learner whose nets both run on BatchNorm running statistics (eval mode), as micro_loss's target does, and a
    batch of 8: the tests below compute the expected TD target from the same nets."""
    cfg = LearnerConfig(micro_batch=8, accum_steps=1, compile=False, amp="off", **options)
    dqn = learner(cfg, batchnorm_batch_stats=False)
    dqn.online.eval()
    dqn.target.eval()
    return dqn, synthetic_batch(8)


def test_double_dqn_target_bootstraps_on_the_target_net_at_the_online_argmax():
    """learner.rule double: target = r + discount * Q_target(s', argmax_a Q_online(s', a))."""
    dqn, batch = learner_on_running_statistics(rule="double")
    torch.manual_seed(5)
    with torch.no_grad():
        for p in dqn.online.parameters():  # an online net that has moved away from its target copy
            p.add_(0.05 * torch.randn_like(p))
        q_online, q_target = dqn.online(batch["next_obs"]), dqn.target(batch["next_obs"])
    greedy = q_target.gather(1, q_online.argmax(1, keepdim=True)).squeeze(1)
    assert not torch.allclose(greedy, q_target.max(1).values)  # the target's own max would differ on this batch
    _, td, q = dqn.micro_loss(batch)
    target = batch["reward"] + batch["discount"] * greedy
    torch.testing.assert_close(td, (q - target).abs(), atol=1e-5, rtol=1e-5)


def munchausen_bonus(q_here, action, tau):
    """The reference bonus: clamp(tau * log softmax(Q_target(s) / tau)[a], -1, 0)."""
    log_pi = torch.log_softmax(q_here / tau, dim=1).gather(1, action[:, None]).squeeze(1)
    return (tau * log_pi).clamp(-1.0, 0.0)


def test_munchausen_target_adds_the_log_policy_bonus_and_bootstraps_on_the_soft_value():
    """Rule munchausen, alpha a, tau t: target = r + a * clamp(t * log pi(a|s), -1, 0) + discount * t * logsumexp(Q'/t),
    pi = softmax(Q_target(s) / t), Q' = Q_target(s')."""
    alpha, tau = 0.9, 0.03
    dqn, batch = learner_on_running_statistics(rule="munchausen", munchausen_alpha=alpha, munchausen_tau=tau)
    with torch.no_grad():
        q_here, q_next = dqn.target(batch["obs"]), dqn.target(batch["next_obs"])
    bonus = munchausen_bonus(q_here, batch["action"], tau)
    assert (bonus < 0).any()  # the bonus takes part on this batch
    _, td, q = dqn.micro_loss(batch)
    target = batch["reward"] + alpha * bonus + batch["discount"] * tau * torch.logsumexp(q_next / tau, dim=1)
    torch.testing.assert_close(td, (q - target).abs(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("rule, online_on_next_obs", [("double", 1), ("munchausen", 0)])
def test_the_online_net_plays_s_prime_only_for_the_double_dqn_argmax(rule, online_on_next_obs):
    """Munchausen bootstraps on the target net's soft value: the online net's forward on s' would be wasted work."""
    dqn, batch = learner_on_running_statistics(rule=rule)
    seen = []
    dqn.online.register_forward_hook(lambda module, args, out: seen.append(args[0]))
    dqn.micro_loss(batch)
    assert seen and sum(x is batch["next_obs"] for x in seen) == online_on_next_obs


def mario_batch(n=16, reward=30.0):
    """Random Mario-shaped observations, a constant reward and discount 0: the TD target is the scaled reward."""
    obs = torch.randint(0, 256, (n, 4, 84, 84), dtype=torch.uint8)
    return {
        "obs": obs,
        "next_obs": torch.randint(0, 256, (n, 4, 84, 84), dtype=torch.uint8),
        "action": torch.randint(0, 7, (n,)),
        "reward": torch.full((n,), reward),
        "discount": torch.zeros(n),
    }


def test_td_target_uses_the_scaled_reward():
    cfg = LearnerConfig(
        micro_batch=16, accum_steps=1, compile=False, amp="off", rule="double"
    )  # Mario's Munchausen bonus would add to the reward
    dqn = DQNLearner(learner_config(cfg, "mario"), MARIO, CPU)
    batch = mario_batch()
    _, td, q = dqn.micro_loss(batch)  # discount 0: target = reward * scale = 2.0
    assert torch.allclose(td, (q - 2.0).abs(), atol=1e-5)


def test_mario_learner_trains_on_munchausen_target_by_default():
    """learner.rule auto is munchausen on Mario, alpha 0.9 and tau 0.03: at discount 0 the target is the scaled reward plus
    the bonus."""
    dqn = DQNLearner(learner_config(LearnerConfig(micro_batch=16, accum_steps=1, compile=False, amp="off"), "mario"), MARIO, CPU)
    assert (dqn.cfg.rule, dqn.cfg.munchausen_alpha, dqn.cfg.munchausen_tau) == ("munchausen", 0.9, 0.03)
    assert type(dqn.rule) is Munchausen and (dqn.rule.alpha, dqn.rule.tau) == (0.9, 0.03)
    batch = mario_batch()
    dqn.target.eval()
    with torch.no_grad():
        bonus = munchausen_bonus(dqn.target(batch["obs"]), batch["action"], dqn.cfg.munchausen_tau)
    assert (bonus < -0.01).any()  # the bonus takes part on this batch
    _, td, q = dqn.micro_loss(batch)
    torch.testing.assert_close(td, (q - (2.0 + 0.9 * bonus)).abs(), atol=1e-4, rtol=1e-4)


def test_the_learner_trains_the_function_the_actors_play():
    cfg = LearnerConfig(micro_batch=16, accum_steps=1, compile=False, amp="off")
    dqn = DQNLearner(learner_config(cfg), MARIO, CPU)
    batch = mario_batch()
    before = dqn.online.features[1].running_mean.clone()
    _, _, q = dqn.micro_loss(batch)
    assert not torch.equal(before, dqn.online.features[1].running_mean)  # the train-mode pass moved the statistics
    dqn.online.eval()  # what an actor runs, with the statistics the learner just used
    with torch.no_grad():
        played = dqn.online(batch["obs"]).gather(1, batch["action"].unsqueeze(1)).squeeze(1)
    assert torch.allclose(q, played, atol=1e-5)


@pytest.mark.parametrize("rule", ["double", "munchausen"])
def test_one_target_forward_over_s_prime_and_s_gives_each_batchs_own_values(rule):
    """Munchausen's target net runs once over s' and s stacked; eval-mode BatchNorm keeps the rows apart, so each half
    is what a forward of that batch alone gives. Double DQN needs only s'."""
    dqn, batch = learner_on_running_statistics(rule=rule)
    with torch.no_grad():  # running statistics away from their defaults, so a batch-statistics forward would differ
        for m in dqn.target.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-1, 1)
                m.running_var.uniform_(0.5, 2)
        alone_next, alone_here = dqn.target(batch["next_obs"]).float(), dqn.target(batch["obs"]).float()
    passes = dqn.target_values(batch)
    next_target, target_here = passes["target(s')"], passes.get("target(s)")
    torch.testing.assert_close(next_target, alone_next, rtol=1e-5, atol=1e-6)
    if rule == "munchausen":
        assert target_here is not None
        torch.testing.assert_close(target_here, alone_here, rtol=1e-5, atol=1e-6)
    else:
        assert target_here is None


def test_the_statistics_pass_stops_before_the_head_and_moves_the_same_statistics():
    """The train-mode pass that moves BatchNorm's running statistics runs the trunk only (every BatchNorm is there):
    the statistics equal those of a whole-network train-mode forward."""
    dqn = DQNLearner(learner_config(LearnerConfig(micro_batch=16, accum_steps=1, compile=False, amp="off"), "mario"), MARIO, CPU)
    reference = copy.deepcopy(dqn.online)
    batch = mario_batch()
    seen = []
    for name in ("value", "advantage"):
        getattr(dqn.online, name).register_forward_hook(lambda module, args, out: seen.append(len(args[0])))
    dqn.micro_loss(batch)
    assert seen == [16, 16]  # Munchausen: the head ran once per stream, the loss's forward, not the statistics pass
    reference.train()
    with torch.no_grad():
        reference(batch["obs"])
    for (name, got), (_, want) in zip(dqn.online.named_buffers(), reference.named_buffers()):
        torch.testing.assert_close(got, want, rtol=0, atol=0, msg=name)


def test_the_compile_warm_up_batch_carries_what_the_rule_needs():
    """The loop's stand-in replay for the compile warm-up gives the fields the run's rule reads, so the warm-up's
    updates run on it."""
    from learner.warm_up import SyntheticReplay
    from shared.config import RunConfig

    cfg = resolve_config(RunConfig())
    dqn = DQNLearner(dataclasses.replace(cfg.learner.resolved("cpu"), compile=False, micro_batch=4), MARIO, CPU)
    replay = SyntheticReplay(MARIO, CPU)
    batch = replay.sample(4)
    assert batch["obs"].shape == batch["next_obs"].shape == (4, 4, 84, 84)
    assert batch["action"].shape == batch["reward"].shape == batch["discount"].shape == (4,)
    assert dqn.warm_up(replay, updates=1) >= 0.0
