"""Configuration: bad values are refused with a message naming the field and the value; JSON round-trips."""

import subprocess
import sys

import pytest

from shared.config import ActorConfig, ConfigError, EnvConfig, LearnerConfig, RunConfig
from shared.exploration import epsilons


@pytest.mark.parametrize("path,value,needle", [
    ("actors", 0, "actors=0"),
    ("total_env_steps", -1, "total_env_steps=-1"),
    ("total_env_steps", 1.5, "total_env_steps=1.5"),
    ("learner.steps", -1, "learner.steps=-1"),
    ("env.stage", "9-9", "env.stage='9-9'"),
    ("env.name", "pong", "env.name='pong'"),
    ("env.frame_skip", 0, "env.frame_skip=0"),
    ("env.snake_size", 3, "env.snake_size=3"),
    ("env.snake_obs", "pixels", "env.snake_obs='pixels'"),
    ("env.snake_hunger", -1, "env.snake_hunger=-1"),
    ("env.fuelbreak_size", 7, "env.fuelbreak_size=7"),
    ("env.fuelbreak_budget", 0, "env.fuelbreak_budget=0"),
    ("env.fuelbreak_budget", 5000, "env.fuelbreak_budget=5000"),
    ("env.fuelbreak_ignitions", 0, "env.fuelbreak_ignitions=0"),
    ("actor.batch_steps", 0, "actor.batch_steps=0"),
    ("actor.epsilon", 1.5, "actor.epsilon=1.5"),
    ("replay.capacity", 100, "replay.capacity=100"),
    ("replay.gamma", 1.5, "replay.gamma=1.5"),
    ("transport.host", "0.0.0.0", "transport.host='0.0.0.0'"),
    ("transport.base_port", 80, "transport.base_port=80"),
])
def test_bad_value_is_named(path, value, needle):
    cfg = RunConfig()
    target = cfg
    *parents, leaf = path.split(".")
    for name in parents:
        target = getattr(target, name)
    setattr(target, leaf, value)
    with pytest.raises(ConfigError, match=needle.replace("[", r"\[").replace(".", r"\.")):
        cfg.validate()


def test_json_round_trip_and_unknown_keys():
    cfg = RunConfig(actors=3)
    cfg.env.stage = "4-2"
    cfg.replay.n_step = 5
    back = RunConfig.from_json(cfg.to_json())
    assert back == cfg
    with pytest.raises(ConfigError, match="bogus"):
        RunConfig.from_json('{"bogus": 1}')


def test_launcher_reports_bad_value_and_exits_2():
    proc = subprocess.run([sys.executable, "-m", "launch.local", "--actors", "0", "--collect-only"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "actors=0" in proc.stderr


def test_configuration_reference_lists_every_option():
    import dataclasses
    import os

    def options(cls, prefix=""):
        for f in dataclasses.fields(cls):
            factory = f.default_factory if f.default_factory is not dataclasses.MISSING else None
            if factory is not None and dataclasses.is_dataclass(factory):
                yield from options(factory, prefix + f.name + ".")
            else:
                yield "--" + prefix + f.name.replace("_", "-")

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "docs", "configuration.md")) as fh:
        doc = fh.read()
    reference = doc.split("## Configuration reference", 1)[1].split("\n## ", 1)[0]
    missing = [name for name in options(RunConfig) if f"`{name}`" not in reference]
    assert not missing, missing


def test_auto_fields_follow_the_env_until_set_and_are_saved_resolved():
    cfg = RunConfig()
    assert (cfg.actor.envs_per_actor, cfg.actor.eps_anneal_steps) == (1, 25_000)  # Mario
    cfg.env.name = "fuelbreak"
    cfg.validate()
    assert (cfg.actor.envs_per_actor, cfg.actor.eps_anneal_steps) == (32, 1_000)
    saved = RunConfig.from_json(cfg.to_json())
    assert (saved.actor.envs_per_actor, saved.actor.eps_anneal_steps) == (32, 1_000)
    cfg.actor.envs_per_actor = 4  # set by hand: no longer auto
    cfg.env.name = "mario"
    cfg.validate()
    assert (cfg.actor.envs_per_actor, cfg.actor.eps_anneal_steps) == (4, 25_000)
    explicit = RunConfig(env=EnvConfig(name="fuelbreak"), actor=ActorConfig(envs_per_actor=2, eps_anneal_steps=0))
    assert (explicit.actor.envs_per_actor, explicit.actor.eps_anneal_steps) == (2, 0)
    alone = ActorConfig()  # outside a RunConfig nothing resolves it, and using it says so
    assert (alone.envs_per_actor, alone.eps_anneal_steps) == (0, -1)
    with pytest.raises(ConfigError, match="actor.envs_per_actor=0"):
        epsilons(alone, 4, 0, 0)
    built = RunConfig(env=EnvConfig(name="fuelbreak"), actor=ActorConfig())
    assert (built.actor.envs_per_actor, built.actor.eps_anneal_steps) == (32, 1_000)


@pytest.mark.parametrize("env,scale", [("mario", 1 / 15), ("catch", 1.0), ("fake", 1.0)])
def test_reward_scale_auto_per_env(env, scale):
    cfg = LearnerConfig().resolved("cpu", env)
    assert cfg.reward_scale == pytest.approx(scale)
    assert LearnerConfig(reward_scale=0.5).resolved("cpu", env).reward_scale == 0.5


def test_learning_rate_decays_linearly_to_its_final_fraction():
    cfg = LearnerConfig(lr=2e-4, lr_final=0.1, lr_decay_steps=1000)
    assert cfg.lr_at(0) == pytest.approx(2e-4)
    assert cfg.lr_at(500) == pytest.approx(1.1e-4)
    assert cfg.lr_at(1000) == cfg.lr_at(10**9) == pytest.approx(2e-5)
    assert LearnerConfig(lr=2e-4, lr_decay_steps=0).lr_at(10**9) == 2e-4
    with pytest.raises(ConfigError, match="learner.lr_final=0"):
        LearnerConfig(lr_final=0).validate()
