"""A trained agent as one file: the online Q-network's tensors in safetensors, and in its string metadata everything that
rebuilds and plays it (written by ``python -m launch.tools.export``, played by ``python -m launch.evaluate --pretrained``).

The contract (``format`` ``warppipe-agent/1``): the tensors are the online network's ``state_dict`` under its own names
(no ``_orig_mod.`` prefix), floating ones in the metadata's ``dtype`` (fp32, fp16 or bf16: a loader casts them to fp32),
integer ones (BatchNorm's ``num_batches_tracked``) as they were. Each metadata value is a JSON string:

- ``format``: ``"warppipe-agent/1"``; ``dtype``: the floating tensors' dtype;
- ``env``: the env as config.json holds it (``EnvConfig.to_dict``, auto values resolved: name, frame_skip, frame_size,
  stack, max_episode_steps, and the env's own options under its name, e.g. ``mario.stage``, ``mario.actions``);
- ``actions``: the action names in action order (Mario: the buttons of each, joined by ``+``);
- ``network``: ``net`` (``NetConfig``, e.g. ``{"dueling": true}``) and what shared/network.py built from the env's spec:
  ``family``, ``obs_shape``, ``stack``, ``num_actions``;
- ``warppipe``: the ``version`` and ``commit`` that wrote the file;
- ``source``: the run folder's file it came from (``best.pt`` or ``checkpoint.pt``) and ``counters`` (``weights_version``,
  ``updates``, ``env_steps``), and ``eval``: that file's evaluation summary (best.pt's; ``null`` where there is none).

A file is at most :data:`MAX_BYTES`. Only this module reads or writes the layout.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from shared.config import EnvConfig, NetConfig, RunConfig
from shared.config_migration import read_config
from shared.envs import action_names, check_env, env_spec
from shared.network import build_q_network, network_family

FORMAT = "warppipe-agent/1"
MAX_BYTES = 10_000_000
"""The largest agent file written: 10 MB (a default Mario network in fp32 is about 13 MB, in fp16 half that)."""
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class AgentFileError(ValueError):
    """An agent file that cannot be written (too large, a dtype that overflows) or read (not one, another layout)."""


@dataclasses.dataclass
class Agent:
    """What an agent file holds: the network's tensors (as stored) and its metadata, parsed."""

    tensors: dict[str, torch.Tensor]
    env: EnvConfig
    net: NetConfig
    meta: dict[str, Any]

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The tensors with floating ones in fp32, as the network loads them."""
        return {k: v.float() if v.is_floating_point() else v for k, v in self.tensors.items()}

    def network(self) -> torch.nn.Module:
        """The Q-network (shared/network.py) on the CPU in eval mode, loaded with these tensors."""
        net = build_q_network(env_spec(self.env), dueling=self.net.dueling)
        net.load_state_dict(self.state_dict())
        return net.eval()


def warppipe_build() -> dict[str, str]:
    """This code's version (the installed package's, else setup.cfg's) and git commit (``unknown`` outside a checkout)."""
    version = "unknown"
    try:
        from importlib.metadata import version as dist_version

        version = dist_version("warppipe")
    except Exception:  # not installed: the checkout's setup.cfg
        try:
            with open(os.path.join(_ROOT, "setup.cfg"), encoding="utf-8") as fh:
                version = next(line.split("=", 1)[1].strip() for line in fh if line.startswith("version"))
        except (OSError, StopIteration):
            pass
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=_ROOT, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = "unknown"
    return {"version": version, "commit": commit or "unknown"}


def _cast(online: dict[str, torch.Tensor], dtype: str) -> dict[str, torch.Tensor]:
    target = DTYPES[dtype]
    out = {}
    for name, tensor in online.items():
        t = tensor.detach().cpu()
        if t.is_floating_point() and t.dtype != target:
            cast = t.to(target)
            if bool(torch.isfinite(t).all()) and not bool(torch.isfinite(cast).all()):
                raise AgentFileError(f"tensor {name!r} overflows {dtype} (largest |value| {t.abs().max().item():g}): try bf16")
            t = cast
        out[name.removeprefix("_orig_mod.")] = t.contiguous()
    return out


def agent_bytes(
    online: dict[str, torch.Tensor],
    cfg: RunConfig,
    *,
    source: str,
    counters: dict | None = None,
    evaluation: dict | None = None,
    dtype: str = "fp32",
    build: dict[str, str] | None = None,
) -> bytes:
    """The agent file of the online network ``online`` of a run configured by ``cfg`` (its env and net), from ``source``
    (``best.pt`` or ``checkpoint.pt``); AgentFileError when it would exceed :data:`MAX_BYTES`, naming its size."""
    if dtype not in DTYPES:
        raise AgentFileError(f"dtype {dtype!r} must be one of {', '.join(DTYPES)}")
    _, env = check_env(cfg.env)
    spec = env_spec(env)
    counters = counters or {}
    network = {
        "net": dataclasses.asdict(cfg.net),
        "family": network_family(spec),
        "obs_shape": [int(d) for d in spec.obs_shape],
        "stack": int(spec.stack),
        "num_actions": int(spec.num_actions),
    }
    meta = {
        "format": FORMAT,
        "dtype": dtype,
        "env": env.to_dict(),
        "actions": action_names(env),
        "network": network,
        "warppipe": build if build is not None else warppipe_build(),
        "source": {
            "file": source,
            "counters": {
                "weights_version": counters.get("weights_version"),
                "updates": counters.get("updates"),
                "env_steps": counters.get("inserted"),
            },
        },
        "eval": evaluation,
    }
    data = st_save(_cast(online, dtype), metadata={key: json.dumps(value, sort_keys=True) for key, value in meta.items()})
    if len(data) > MAX_BYTES:
        raise AgentFileError(
            f"the agent file would be {len(data):,} bytes ({len(data) / 1e6:.1f} MB) in {dtype}, over the "
            f"{MAX_BYTES / 1e6:g} MB limit" + ("" if dtype != "fp32" else ": fp16 halves it")
        )
    return data


def save_agent(path: str, data: bytes) -> str:
    """Write :func:`agent_bytes`' ``data`` to ``path`` atomically; returns ``path``."""
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def read_agent(data: bytes, where: str = "agent file") -> Agent:
    """Parse an agent file's bytes; AgentFileError names ``where`` and what is wrong."""
    try:
        tensors = st_load(data)
    except (SafetensorError, ValueError, RuntimeError) as exc:
        raise AgentFileError(f"{where} is not a safetensors file: {exc}") from None
    raw = _raw_metadata(data, where)
    if raw.get("format") != json.dumps(FORMAT):
        raise AgentFileError(f"{where} is not a warppipe agent file (format {raw.get('format')!r}, expected {FORMAT!r})")
    try:
        meta = {key: json.loads(value) for key, value in raw.items()}
    except ValueError as exc:
        raise AgentFileError(f"{where} has metadata that is not JSON: {exc}") from None
    try:
        cfg = read_config(json.dumps({"env": meta["env"], "net": meta["network"]["net"]}))
    except (KeyError, TypeError, ValueError) as exc:
        raise AgentFileError(f"{where} carries no readable env and network options: {exc}") from None
    return Agent(tensors=tensors, env=cfg.env, net=cfg.net, meta=meta)


def _raw_metadata(data: bytes, where: str) -> dict[str, str]:
    """The string metadata of safetensors ``data`` (safetensors checked the header already)."""
    try:
        size = int.from_bytes(data[:8], "little")
        raw = json.loads(data[8 : 8 + size]).get("__metadata__") or {}
    except (ValueError, AttributeError) as exc:
        raise AgentFileError(f"{where} has an unreadable header: {exc}") from None
    return {str(k): str(v) for k, v in raw.items()}


def load_agent(path: str) -> Agent:
    """The agent file at ``path``; AgentFileError names the path when it is missing or not one."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise AgentFileError(f"agent file {path!r} is not readable: {exc.strerror or exc}") from None
    return read_agent(data, f"agent file {path!r}")
