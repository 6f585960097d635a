"""The env registry (shared/envs/): built-in envs found by name, unknown ones named in the error, and an env
defined only in the tests (tests/support/plugin_env.py) trained through launch.local's real processes (and, in
``make test-all``, learned)."""

import pytest
import torch

from actors.evaluator import build_network, play_episodes
from learner.checkpoint import load_checkpoint
from shared.config import ConfigError, EnvConfig, RunConfig
from shared.envs import BUILTIN, EnvEntry, entry_for, env_spec, names, register
from tests.support.learning import train_on_defaults

UPDATES = 5_000  # the learning test's budget: 100% in every run since the ratio is held (docs/lab/testing-log.md)
PLUMBING_UPDATES = 200
EPISODES = 64


def test_builtin_envs_are_found_by_name_and_unknown_ones_named():
    assert names()[:5] == ["mario", "catch", "fake", "snake", "fuelbreak"] == list(BUILTIN)
    for name in BUILTIN:
        assert entry_for(EnvConfig(name=name)).name == name
    with pytest.raises(ConfigError, match="env.name='pong' must be one of 'mario', 'catch'"):
        entry_for(EnvConfig(name="pong"))
    with pytest.raises(ConfigError, match="env.module='tests.support.nowhere' does not import"):
        entry_for(EnvConfig(name="corridor", module="tests.support.nowhere"))
    with pytest.raises(ConfigError, match=r"env.name='corridor2' .*env.module='tests.support.plugin_env' did not"):
        entry_for(EnvConfig(name="corridor2", module="tests.support.plugin_env"))


def test_a_second_env_of_one_name_is_refused():
    mario = entry_for("mario")
    register(mario)  # the same entry again: a module imported twice
    with pytest.raises(ValueError, match="env 'mario' is already registered"):
        register(EnvEntry("mario", spec=mario.spec, make=mario.make, action_names=mario.action_names))


def test_auto_settings_come_from_the_entry():
    cfg = RunConfig(env=EnvConfig(name="fuelbreak"))
    assert (cfg.actor.envs_per_actor, cfg.actor.eps_anneal_steps) == (32, 1_000)
    assert cfg.learner.resolved("cpu", cfg.env).reward_scale == 100.0
    plugin = EnvConfig(name="corridor", module="tests.support.plugin_env")
    assert env_spec(plugin).obs_shape == (8,)
    assert RunConfig(env=plugin).learner.resolved("cpu", plugin).reward_scale == 1.0


def train_corridor(tmp_path, updates: int) -> tuple[str, dict, RunConfig, torch.nn.Module]:
    """launch.local on the plug-in env, defaults, the ratio held (so every machine trains the same samples per
    transition; docs/lab/testing-log.md has the failures); checks what any such run must show, returns its output, checkpoint,
    config and the last weights' network rebuilt from that config."""
    out, run = train_on_defaults(
        tmp_path,
        "corridor",
        "--env.module",
        "tests.support.plugin_env",
        "--learner.steps",
        str(updates),
        "--learner.exact-ratio",
        timeout=800,
    )
    assert "on corridor (obs float32 8, stack 1, 2 actions, mlp net)" in out, out[:2000]
    assert "Score:" in out and "Success:" in out  # the entry's names in the [MAIN] lines
    # nothing arrived too stale to train on (held sockets buffer about one batch, shared/links.held_kernel_buffer),
    # or the share of the data trained on would depend on timing
    assert "rejected by reason {}" in out, [line for line in out.splitlines() if "accounting" in line]
    state = load_checkpoint(run)
    cfg = RunConfig.from_json(state["config"])
    assert cfg.env.module == "tests.support.plugin_env" and state["counters"]["updates"] == updates
    return out, state, cfg, build_network(cfg.env, state["learner"]["online"], dueling=cfg.net.dueling)


@pytest.mark.timeout(900)  # a hang guard: the run ends on its update budget
def test_an_env_registered_outside_warppipe_trains_through_launch_local(tmp_path):
    """The plumbing: every process imports the module, the run trains its update budget, and the checkpoint's
    network, rebuilt from the saved config, plays the env. Learning is the extended test below."""
    _, _, cfg, net = train_corridor(tmp_path, PLUMBING_UPDATES)
    episodes = play_episodes(net, cfg.env, 8, 0.0, seed=5)
    assert len(episodes) == 8 and all(e.length > 0 for e in episodes)


@pytest.mark.extended  # minutes of learner updates on a tiny network (about 185 s on a slow host): make test-all
@pytest.mark.timeout(900)  # a hang guard: the run ends on its update budget
def test_an_env_registered_outside_warppipe_is_learned(tmp_path, record_property):
    out, state, cfg, net = train_corridor(tmp_path, UPDATES)
    greedy = play_episodes(net, cfg.env, EPISODES, 0.0, seed=5)
    torch.manual_seed(cfg.learner.seed)  # the learner's initial network (learner/trainer.py seeds it so)
    untrained = play_episodes(build_network(cfg.env), cfg.env, EPISODES, 0.0, seed=5)
    rate = sum(e.flag for e in greedy) / EPISODES
    before = sum(e.flag for e in untrained) / EPISODES
    record_property(
        "figures",
        f"corridor plug-in after {UPDATES} updates, {state['counters']['inserted']:,} "
        f"transitions: shortest path in {rate:.0%} of {EPISODES} episodes (untrained {before:.0%})",
    )
    assert before < 0.9, f"the check does not tell learning: the untrained network already scores {before:.0%}"
    assert rate == 1.0, f"greedy took the shortest path in {rate:.0%} of episodes\n{out[-3000:]}"
