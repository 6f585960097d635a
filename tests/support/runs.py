"""Free loopback ports and small run configurations for tests that start real sockets and processes."""

import random
import socket

from shared.config import RunConfig
from shared.resolution import resolve_config


def free_base_port(count: int) -> int:
    """A base port such that base..base+count-1 are all free on 127.0.0.1 right now.

    For a learner the test starts: it binds base_port + slot and the weight ports below, a contiguous range it
    must be told, so the range can only be probed here (a port taken in between fails its bind loudly). A test
    that binds a socket of its own uses ``bind_to_random_port`` instead. Drawn below Linux's ephemeral range
    (32768-60999), where no outgoing connection (an actor reconnecting to a dead learner) can take the port first."""
    for _ in range(200):
        base = random.randint(20000, 32767 - count)
        socks = []
        try:
            for port in range(base, base + count):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port range found")


def small_config(actors=2, envs=2, steps=16, env="fake", capacity=8192, **env_overrides) -> RunConfig:
    cfg = RunConfig(actors=actors, collect_only=True)
    cfg.env.name = env
    for key, value in env_overrides.items():  # a dict sets options of one env: snake={"size": 6}
        if isinstance(value, dict):
            cfg.env.options[key] = dict(value)
        else:
            setattr(cfg.env, key, value)
    cfg.actor.envs_per_actor = envs
    cfg.actor.batch_steps = steps
    cfg.replay.capacity = capacity
    cfg.actor.weights_timeout = 0.0  # data-plane tests run no weight server
    cfg.actor.nice = 0  # exact-count plumbing tests: actors flush on close at full priority (the default is 10)
    cfg.eval.final_episodes = 0  # the end-of-run evaluation has its own tests (tests/integration/test_final_eval.py)
    cfg.transport.base_port = free_base_port(actors + 2) + 2  # weights sockets sit at base_port - 1 and - 2
    return resolve_config(cfg)


# The start of a ``python -c`` script (argv[1]: a run folder): a small real Learner on the fake env, its
# config.json written as a run writes it; the checkpoint tests go on from ``learner``.
SMALL_LEARNER_SCRIPT = r"""
import os, sys, torch
from learner.loop import Learner
from shared.resolution import resolve_run
from tests.support.runs import small_config

run_dir = sys.argv[1]
cfg = small_config(actors=1, envs=1, steps=16, capacity=1024)
cfg.collect_only = False
cfg.learner.compile = False
cfg.learner.micro_batch = 16
with open(os.path.join(run_dir, "config.json"), "w") as fh:
    fh.write(cfg.to_json())
learner = Learner(resolve_run(cfg, device="cpu"), run_dir)
"""
