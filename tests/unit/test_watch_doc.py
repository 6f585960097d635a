"""docs/watch.md's standalone script (no warppipe import) against warppipe itself: the same network output from an agent
file, and on Mario the same stacked observations, rewards and episode ends for the same actions."""

import os
import re

import numpy as np
import pytest
import torch

from shared.agent_file import agent_bytes, load_agent
from shared.config import RunConfig
from shared.envs.frames import FrameStacker
from shared.evaluation.episodes import build_network
from tests.support.paths import ROOT

MARKER = "<!-- watch_agent.py: tests/unit/test_watch_doc.py reads the block below -->"


def script() -> dict:
    """The script's definitions (its main() not run), and a check that it imports nothing of warppipe."""
    with open(os.path.join(ROOT, "docs", "watch.md"), encoding="utf-8") as fh:
        text = fh.read()
    code = re.search(r"```python\n(.*?)```", text.split(MARKER, 1)[1], re.S)
    assert code is not None
    source = code.group(1)
    for module in ("shared", "launch", "learner", "actors", "warppipe"):
        assert not re.search(rf"^\s*(from|import) {module}\b", source, re.M), module
    namespace: dict = {"__name__": "watch_agent"}
    exec(compile(source, "watch_agent.py", "exec"), namespace)
    return namespace


def mario_agent(tmp_path) -> str:
    cfg = RunConfig()  # Mario 1-1, simple buttons, jump release, 84 px, stack 4: the defaults
    torch.manual_seed(0)
    net = build_network(cfg.env, net_cfg=cfg.net).train()
    net(torch.randint(0, 256, (8, 4, 84, 84), dtype=torch.uint8))  # BatchNorm statistics of its own
    path = tmp_path / "mario.safetensors"
    path.write_bytes(agent_bytes(net.eval().state_dict(), cfg, source="best.pt", dtype="fp16"))
    return str(path)


def test_the_script_builds_the_same_network(tmp_path):
    ns, path = script(), mario_agent(tmp_path)
    meta, tensors = ns["read_agent"](path)
    env, network = meta["env"], meta["network"]
    theirs = ns["QNetwork"](env["stack"], env["frame_size"], network["num_actions"], network["net"]["dueling"])
    theirs.load_state_dict(tensors)
    ours = load_agent(path).network()
    obs = torch.randint(0, 256, (6, 4, 84, 84), dtype=torch.uint8, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.allclose(theirs.eval()(obs), ours(obs), rtol=0, atol=1e-5)
        assert torch.equal(theirs(obs).argmax(dim=1), ours(obs).argmax(dim=1))


def test_the_script_sees_mario_as_warppipe_does(tmp_path):
    pytest.importorskip("gym_super_mario_bros")
    from shared.envs.mario import make_mario_env

    ns, path = script(), mario_agent(tmp_path)
    meta, _ = ns["read_agent"](path)
    theirs = ns["Mario"](meta["env"], meta["actions"])
    agent = load_agent(path)
    ours = make_mario_env(agent.env, seed=0)
    stacker = FrameStacker(agent.env.stack, ours.frame_shape)
    rng = np.random.default_rng(5)
    try:
        for _ in range(2):  # two episodes: the reset clears the held buttons and the stack
            assert np.array_equal(theirs.reset(), stacker.reset(ours.reset()))
            for t in range(400):
                action = int(rng.choice([1, 2, 2, 2, 4, 5])) if t % 7 else 0  # mostly right+A: jump releases happen
                obs, reward, ended, info = theirs.step(action)
                frame, r, terminated, truncated, our_info = ours.step(action)
                assert np.array_equal(obs, stacker.push(frame)), t
                assert reward == r and ended == (terminated or truncated) and info["x_pos"] == our_info["x_pos"], t
                if ended:
                    break
    finally:
        theirs.raw.close()
        ours.close()
