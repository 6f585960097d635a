"""Configuration: bad values are refused with a message naming the field and the value; JSON round-trips."""

import subprocess
import sys

import pytest

from shared.config import ConfigError, RunConfig


@pytest.mark.parametrize("path,value,needle", [
    ("actors", 0, "actors=0"),
    ("env.stage", "9-9", "env.stage='9-9'"),
    ("env.name", "pong", "env.name='pong'"),
    ("env.frame_skip", 0, "env.frame_skip=0"),
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
