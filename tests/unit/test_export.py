"""launch.tools.export and shared/agent_file.py: a run's best.pt (or checkpoint.pt) as one safetensors file and back."""

import json
import os

import pytest
import torch
from safetensors import safe_open

from launch.evaluate import main as evaluate
from launch.tools.export import main
from learner.checkpoint import save_best, save_checkpoint
from shared.agent_file import FORMAT, MAX_BYTES, AgentFileError, agent_bytes, load_agent, read_agent
from shared.config import RunConfig
from shared.evaluation.episodes import build_network

EVAL = {"score_mean": 12.5, "score_median": 12.0, "score_max": 20.0, "success_rate": 0.25, "return_mean": 3.0, "episodes": 4}


def catch_config(frame_size: int = 42, dueling: bool = True) -> RunConfig:
    cfg = RunConfig()
    cfg.env.name, cfg.env.frame_size, cfg.net.dueling = "catch", frame_size, dueling
    return cfg


def make_run(folder, cfg: RunConfig, seed: int = 0, best: bool = True) -> dict:
    """A run folder in launch.local's layout: config.json, checkpoint.pt (v9) and best.pt (another network, v4, with its
    eval summary); returns best.pt's state (checkpoint.pt's where there is no best.pt)."""
    os.makedirs(folder, exist_ok=True)
    (folder / "config.json").write_text(cfg.to_json())
    torch.manual_seed(seed)
    last, chosen = build_network(cfg.env, net_cfg=cfg.net), build_network(cfg.env, net_cfg=cfg.net)
    for net in (last, chosen):  # BatchNorm statistics that are not the initial ones
        net.train()(torch.randint(0, 256, (8, cfg.env.stack, cfg.env.frame_size, cfg.env.frame_size), dtype=torch.uint8))
        net.eval()
    counters = {"epoch": 3, "updates": 90, "weights_version": 9, "samples_trained": 0, "inserted": 4321, "wall_seconds": 5.0}
    checkpoint = {"learner": {"online": last.state_dict(), "target": last.state_dict(), "updates": 90}, "counters": counters}
    save_checkpoint(str(folder), checkpoint | {"config": cfg.to_json()})
    if not best:
        return checkpoint
    state = {
        "learner": {"online": chosen.state_dict()},
        "counters": {"updates": 40, "inserted": 2000, "weights_version": 4, "wall_seconds": 2.0},
        "eval": EVAL | {"epsilon": 0.05},
        "config": cfg.to_json(),
    }
    save_best(str(folder), state)
    return state


def test_best_pt_round_trips_exactly_with_the_same_q_values(tmp_path, capsys):
    cfg = catch_config()
    state = make_run(tmp_path / "run", cfg)
    out = tmp_path / "agent.safetensors"
    assert main([str(tmp_path / "run"), "--out", str(out)]) == 0
    line = capsys.readouterr().out
    assert line.startswith(f"[EXPORT] {out}: ") and "best.pt of" in line and "weights v4" in line and "fp32" in line, line
    online = state["learner"]["online"]
    with safe_open(str(out), "pt") as fh:  # only the online network's tensors, under their own names
        assert set(fh.keys()) == set(online)
    agent = load_agent(str(out))
    assert set(agent.tensors) == set(online)
    for key, tensor in online.items():
        assert agent.tensors[key].dtype == tensor.dtype and torch.equal(agent.tensors[key], tensor), key
    net = agent.network()
    reference = build_network(cfg.env, online, cfg.net)
    torch.manual_seed(1)
    obs = torch.randint(0, 256, (5, cfg.env.stack, cfg.env.frame_size, cfg.env.frame_size), dtype=torch.uint8)
    with torch.no_grad():
        assert torch.equal(net(obs), reference(obs))
    assert not net.training


def test_metadata_holds_what_rebuilds_and_plays_it(tmp_path):
    cfg = catch_config(frame_size=48, dueling=False)
    make_run(tmp_path / "run", cfg)
    out = tmp_path / "a.safetensors"
    assert main([str(tmp_path / "run"), "--out", str(out)]) == 0
    with safe_open(str(out), "pt") as fh:
        raw = fh.metadata()
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items())
    meta = {k: json.loads(v) for k, v in raw.items()}  # every value a JSON string
    assert meta["format"] == FORMAT and meta["dtype"] == "fp32"
    assert meta["env"]["name"] == "catch" and meta["env"]["frame_size"] == 48 and meta["env"]["stack"] == cfg.env.stack
    assert meta["network"]["net"] == {"dueling": False} and meta["network"]["family"] == "nature"
    assert meta["network"]["num_actions"] == len(meta["actions"]) == 3
    assert meta["source"] == {"file": "best.pt", "counters": {"weights_version": 4, "updates": 40, "env_steps": 2000}}
    assert meta["eval"] == EVAL | {"epsilon": 0.05}
    assert set(meta["warppipe"]) == {"version", "commit"} and meta["warppipe"]["version"] != ""
    agent = load_agent(str(out))
    assert agent.env.frame_size == 48 and agent.env.name == "catch" and agent.net.dueling is False
    assert agent.meta == meta


def test_mario_options_travel_in_the_metadata():
    cfg = RunConfig()  # Mario's defaults: a fresh network, exported without a run folder
    cfg.env.options = {"mario": {"stage": "1-2", "actions": "right_only"}}
    net = build_network(cfg.env, net_cfg=cfg.net)
    data = agent_bytes(net.state_dict(), cfg, source="best.pt", dtype="fp16", build={"version": "x", "commit": "y"})
    assert len(data) <= MAX_BYTES
    agent = read_agent(data)
    assert agent.meta["env"]["mario"]["stage"] == "1-2" and agent.meta["env"]["mario"]["actions"] == "right_only"
    assert agent.meta["env"]["frame_skip"] == 4 and agent.meta["env"]["max_episode_steps"] == 4500  # auto resolved
    assert agent.meta["actions"][:3] == ["NOOP", "right", "right+A"] and agent.meta["dtype"] == "fp16"
    assert agent.meta["warppipe"] == {"version": "x", "commit": "y"} and agent.meta["eval"] is None
    for key, tensor in net.state_dict().items():  # fp16 on file, fp32 again when loaded
        loaded = agent.state_dict()[key]
        assert loaded.dtype == tensor.dtype
        if tensor.is_floating_point():
            assert torch.equal(loaded, tensor.half().float()), key


def test_too_large_a_file_is_refused_naming_its_size():
    cfg = RunConfig()  # Mario's default network: about 13 MB in fp32
    net = build_network(cfg.env, net_cfg=cfg.net)
    with pytest.raises(AgentFileError, match=r"would be 1[0-9],\d{3},\d{3} bytes \(1\d\.\d MB\) in fp32, over the 10 MB limit"):
        agent_bytes(net.state_dict(), cfg, source="best.pt", dtype="fp32")


def test_auto_dtype_falls_back_to_fp16_where_fp32_is_too_large(tmp_path, capsys):
    cfg = RunConfig()
    cfg.env.frame_size = 84
    make_run(tmp_path / "run", cfg, best=False)
    assert main([str(tmp_path / "run"), "--net", "last", "--out", str(tmp_path / "m.safetensors")]) == 0
    assert "fp16" in capsys.readouterr().out
    assert os.path.getsize(tmp_path / "m.safetensors") <= MAX_BYTES
    assert main([str(tmp_path / "run"), "--net", "last", "--dtype", "fp32", "--out", str(tmp_path / "n.safetensors")]) == 2
    err = capsys.readouterr().err
    assert "over the 10 MB limit" in err and "bytes" in err and not (tmp_path / "n.safetensors").exists()


def test_a_missing_best_pt_is_named_and_last_exports_the_checkpoint(tmp_path, capsys):
    cfg = catch_config()
    checkpoint = make_run(tmp_path / "run", cfg, best=False)
    assert main([str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --net=best: no ") and repr(str(tmp_path / "run" / "best.pt")) in err, err
    assert "--net last" in err
    assert main([str(tmp_path / "run"), "--net", "last"]) == 0  # default --out: in the run folder, by its label
    agent = load_agent(str(tmp_path / "run" / "agent-catch.safetensors"))
    assert agent.meta["source"]["file"] == "checkpoint.pt" and agent.meta["source"]["counters"]["weights_version"] == 9
    assert agent.meta["eval"] is None
    for key, tensor in checkpoint["learner"]["online"].items():
        assert torch.equal(agent.tensors[key], tensor), key
    assert main([str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_loading_names_a_missing_or_foreign_file(tmp_path):
    with pytest.raises(AgentFileError, match="nothing.safetensors"):
        load_agent(str(tmp_path / "nothing.safetensors"))
    (tmp_path / "junk.safetensors").write_bytes(b"not a safetensors file at all")
    with pytest.raises(AgentFileError, match="junk.safetensors.*not a safetensors file"):
        load_agent(str(tmp_path / "junk.safetensors"))
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(2)}, str(tmp_path / "other.safetensors"), metadata={"format": "pt"})
    with pytest.raises(AgentFileError, match="not a warppipe agent file"):
        load_agent(str(tmp_path / "other.safetensors"))


def test_evaluate_plays_a_pretrained_file_with_its_own_env(tmp_path, capsys):
    cfg = catch_config(frame_size=48)
    make_run(tmp_path / "run", cfg)
    out = tmp_path / "agent.safetensors"
    assert main([str(tmp_path / "run"), "--out", str(out)]) == 0
    played = tmp_path / "played.json"
    no_rows = ["--low-epsilon-episodes", "0", "--noop-episodes", "0"]
    assert evaluate([f"--pretrained={out}", "--episodes", "2", "--json", str(played), *no_rows]) == 0
    text = capsys.readouterr().out
    assert f"checkpoint {out}, updates 40, env steps 2,000" in text and "(pretrained net)" in text, text
    data = json.loads(played.read_text())
    assert data["net"] == "pretrained" and data["checkpoint"] == str(out) and data["run_dir"] is None
    assert data["env"]["name"] == "catch" and data["env"]["frame_size"] == 48 and data["summary"]["episodes"] == 2
    assert evaluate([str(tmp_path / "run"), f"--pretrained={out}"]) == 2
    assert "plays the agent file's network: no RUN_DIR with it" in capsys.readouterr().err
    assert evaluate(["--pretrained", str(tmp_path / "gone.safetensors")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: agent file ") and "gone.safetensors" in err, err
