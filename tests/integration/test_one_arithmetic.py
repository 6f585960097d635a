"""One arithmetic: the greedy policy the learner trains is the one the actors play.

On Mario 1-1's probe states (shared/probe_set.py), a learner with the default config as a CPU run resolves it, trained a
few hundred updates on real 1-1 transitions and reloaded from its checkpoint, picks the same greedy action through
its own forward (the online net in eval mode through ``online_fn``, compiled where the config compiles, under its
``_autocast()``) as the actors' copy of its published weights (learner/weight_server.py ``state_arrays``, the WEIGHTS
message, actors/collector.py ``load_weights``: BatchNorm folded, ``actor.precision`` fp32), on at least 99.5% of the
states; at initialisation too. Under bf16 autocast the learner trained a function the actors did not play (the
greedy action differed where the action gap is below bf16's rounding of the convolutions).

The figures (agreement, the median action gap) are printed; ``pytest -s`` shows them.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest
import torch

from actors.collector import Collector
from learner.checkpoint import load_checkpoint, save_checkpoint
from learner.probe_figures import ProbeMonitor
from learner.replay.frame_ring import FrameReplay
from learner.trainer import DQNLearner
from learner.warm_up import missing_compiler
from learner.weight_server import state_arrays
from shared.config import RunConfig
from shared.envs import env_spec
from shared.probe_set import probe_set, scripted_play
from shared.resolution import resolve_config, resolve_run
from shared.wire import protocol

pytestmark = pytest.mark.slow

PROBE_N = 256
REPLAY_STEPS = 1024  # real 1-1 transitions the learner trains on
UPDATES = 100  # a trained checkpoint, not the initialisation
SYNC_EVERY = 100  # updates between target syncs (a run's 16,000 env steps are 1,000 updates)
MIN_AGREEMENT = 0.995
CPU = torch.device("cpu")


def learner_config(cfg: RunConfig, amp: str | None = None):
    """The learner's config as a CPU run builds it (learner/loop.py ``Learner``); ``amp`` overrides learner.amp."""
    learner_cfg = cfg.learner.resolved(CPU.type)
    if learner_cfg.compile and missing_compiler(CPU.type):
        learner_cfg = dataclasses.replace(learner_cfg, compile=False)
    return learner_cfg if amp is None else dataclasses.replace(learner_cfg, amp=amp)


def learner_greedy(dqn: DQNLearner, states: np.ndarray) -> np.ndarray:
    """The greedy actions of the learner's forward as it trains: the online net in eval mode, through ``online_fn``,
    under ``_autocast()``."""
    was_training = dqn.online.training
    dqn.online.eval()
    try:
        with torch.no_grad(), dqn._autocast():
            q = dqn.online_fn(torch.from_numpy(states).to(dqn.device)).float()
    finally:
        dqn.online.train(was_training)
    return q.argmax(dim=1).cpu().numpy()


def actor_greedy(collector: Collector, dqn: DQNLearner, states: np.ndarray, version: int) -> np.ndarray:
    """The greedy actions of the actors' copy of ``dqn``'s published weights: what the weight server publishes
    (``state_arrays``), encoded and decoded as the WEIGHTS message, loaded as a collector loads them."""
    run = protocol.new_run_id()
    parts = protocol.encode_weights(version, state_arrays(dqn.online), run)
    expected = {  # actors/weights_client.py WeightClient.expected
        name: (tuple(t.shape), np.dtype(np.float32 if t.is_floating_point() else np.int64).str)
        for name, t in collector.net.state_dict().items()
    }
    got_run, got_version, arrays, _ = protocol.decode_weights(parts, expected)
    collector.load_weights(got_version, arrays, got_run)
    with torch.inference_mode():  # Collector.q_values on the probe states
        q = collector.acting_net(torch.from_numpy(states)).numpy()
    return q.argmax(axis=1)


def fill_replay(cfg: RunConfig, steps: int) -> FrameReplay:
    """One stream of ``steps`` real 1-1 transitions of the probe's scripted policy (another seed, more exploration)."""
    spec = env_spec(cfg.env)
    play = scripted_play(cfg.env, steps, seed=1, explore=0.2)
    replay = FrameReplay(
        1,
        steps,
        frame_shape=spec.obs_shape,
        stack=spec.stack,
        n_step=cfg.replay.n_step,
        gamma=cfg.replay.gamma,
        num_actions=spec.num_actions,
    )
    replay.add(
        0,
        play.frames[None],
        play.actions[None].astype(np.uint8),
        play.rewards[None],
        play.terminated[None],
        play.first[None],
    )
    return replay


def measure(tmp_path, amp: str | None = None, updates: int = UPDATES) -> dict:
    """Agreement of the learner's and the actors' greedy actions on 1-1's probe states, at initialisation and after
    ``updates`` updates and a checkpoint round trip; ``amp`` overrides the config's learner.amp (the report's bf16)."""
    started = time.perf_counter()
    cfg = resolve_config(RunConfig())
    assert cfg.env.name == "mario" and cfg.actor.precision == "fp32"
    probe = probe_set(cfg.env, PROBE_N, seed=0)
    states = probe.states
    spec = env_spec(cfg.env)
    learner_cfg = learner_config(cfg, amp)
    dqn = DQNLearner(learner_cfg, spec, CPU, cfg.net)
    collector = Collector(resolve_run(cfg, device="cpu"), 0, 1, 0)
    try:
        init = float((learner_greedy(dqn, states) == actor_greedy(collector, dqn, states, 1)).mean())
        replay = fill_replay(cfg, REPLAY_STEPS)
        for i in range(updates):
            dqn.update(replay)
            if (i + 1) % SYNC_EVERY == 0:
                dqn.sync_target()
        save_checkpoint(str(tmp_path), {"learner": dqn.state_dict(), "counters": {"updates": dqn.updates}, "config": "{}"})
        resumed = DQNLearner(learner_cfg, spec, CPU, cfg.net)
        resumed.load_state_dict(load_checkpoint(str(tmp_path))["learner"])
        mine = learner_greedy(resumed, states)
        theirs = actor_greedy(collector, resumed, states, 2)
        q = ProbeMonitor(states, CPU).q_values(resumed.online)
    finally:
        collector.close()
    top = q.topk(2, dim=1).values
    gaps = (top[:, 0] - top[:, 1]).numpy()
    differ = mine != theirs
    return {
        "amp": str(resumed.amp_dtype).removeprefix("torch.") if resumed.amp_dtype is not None else "fp32",
        "compiled": learner_cfg.compile,
        "init": init,
        "trained": float((~differ).mean()),
        "gap_median": float(np.median(gaps)),
        "gap_median_relative": float(np.median(gaps / np.maximum(top[:, 0].abs().numpy(), 1e-6))),
        "gap_at_disagreements": float(gaps[differ].max()) if differ.any() else 0.0,
        "span": (float(probe.scores.min()), float(probe.scores.max())),
        "updates": resumed.updates,
        "seconds": time.perf_counter() - started,
    }


def test_the_learner_trains_the_function_the_actors_play(tmp_path):
    m = measure(tmp_path)
    print(
        f"\none arithmetic, Mario 1-1, {PROBE_N} probe states (x_pos {m['span'][0]:.0f}-{m['span'][1]:.0f}): learner "
        f"({m['amp']}, {'compiled' if m['compiled'] else 'eager'}) vs actors (fp32 folded copy) agree on "
        f"{m['init']:.1%} at init, {m['trained']:.1%} after {m['updates']} updates; median action gap "
        f"{m['gap_median']:.4g} (relative {m['gap_median_relative']:.3g}), largest gap where they differ "
        f"{m['gap_at_disagreements']:.3g}; {m['seconds']:.0f} s"
    )
    assert m["span"][1] > 2000  # the probe states reach well into the stage
    assert m["updates"] == UPDATES
    assert m["init"] >= MIN_AGREEMENT
    assert m["trained"] >= MIN_AGREEMENT
