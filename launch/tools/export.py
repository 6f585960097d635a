"""Export a run's network as one safetensors file that plays without warppipe's training code (shared/agent_file.py).

    python -m launch.tools.export runs/RUN                                # best.pt -> runs/RUN/agent-1-1.safetensors
    python -m launch.tools.export runs/RUN --out agents/mario-1-1.safetensors
    python -m launch.tools.export runs/RUN --net last                     # checkpoint.pt's online weights instead
    python -m launch.evaluate --pretrained agents/mario-1-1.safetensors --episodes 20   # play it

The file holds only the online network's tensors, at most 10 MB (``--dtype auto``: fp32 where that fits, else fp16),
and as metadata the env and its options, the network options, the action names, warppipe's version and commit, the
weights' version and best.pt's evaluation summary. docs/watch.md loads it with torch, safetensors and
gym-super-mario-bros alone. Bad input prints one line on stderr naming it and exits with 2.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Annotated, Literal

import tyro

from launch.cli import UsageError, import_plugin, parse
from launch.evaluate import read_network_checkpoint
from learner.checkpoint import BEST_NAME, CHECKPOINT_NAME
from shared.agent_file import MAX_BYTES, AgentFileError, agent_bytes, read_agent, save_agent
from shared.config import ConfigError
from shared.config_migration import read_config
from shared.envs import env_label

PROG = "python -m launch.tools.export"


@dataclasses.dataclass
class ExportArgs:
    run_dir: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="RUN_DIR")]
    """Run folder (best.pt, checkpoint.pt, config.json)."""
    out: Annotated[str | None, tyro.conf.arg(metavar="FILE")] = None
    """Where to write the agent (default: RUN_DIR/agent-LABEL.safetensors, LABEL the Mario stage or the env name)."""
    net: Literal["best", "last"] = "best"
    """best: RUN_DIR/best.pt (the weights the run chose); last: checkpoint.pt's online weights."""
    dtype: Literal["auto", "fp32", "fp16", "bf16"] = "auto"
    """The floating tensors' dtype in the file; auto: fp32 where the file fits 10 MB, else fp16."""


def load_state(run_dir: str, net: str) -> tuple[str, dict]:
    """The path of the file ``net`` names in ``run_dir`` and its contents; UsageError names the path that is missing."""
    if not os.path.isdir(run_dir):
        raise UsageError(f"run folder {run_dir!r} does not exist")
    name = BEST_NAME if net == "best" else CHECKPOINT_NAME
    path = os.path.join(run_dir, name)
    if not os.path.isfile(path):
        hint = (
            " (it is written at the first evaluation during training; --net last exports checkpoint.pt)" if net == "best" else ""
        )
        raise UsageError(f"--net={net}: no {path!r}{hint}")
    return path, read_network_checkpoint(path)


def export(args: ExportArgs) -> tuple[str, bytes]:
    """The agent file's path and bytes for ``args``; UsageError names what is missing, unreadable or too large."""
    path, state = load_state(args.run_dir, args.net)
    config_path = os.path.join(args.run_dir, "config.json")
    try:
        if isinstance(state.get("config"), str):
            cfg = read_config(state["config"])
        else:
            with open(config_path, encoding="utf-8") as fh:
                cfg = read_config(fh.read())
    except (OSError, ValueError, TypeError) as exc:
        raise UsageError(f"{path!r} carries no config and {config_path!r} is not readable: {exc}") from None
    try:
        import_plugin(cfg.env.module)  # a plug-in env registers itself before its spec is asked for
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    counters = state.get("counters") or {}
    evaluation = state.get("eval") if isinstance(state.get("eval"), dict) else None
    source = os.path.basename(path)
    dtypes = ("fp32", "fp16") if args.dtype == "auto" else (args.dtype,)
    try:
        for i, dtype in enumerate(dtypes):
            try:
                data = agent_bytes(
                    state["learner"]["online"], cfg, source=source, counters=counters, evaluation=evaluation, dtype=dtype
                )
                break
            except AgentFileError as exc:
                if i + 1 == len(dtypes) or "limit" not in str(exc):
                    raise
        agent = read_agent(data)
        agent.network()  # the file rebuilds: the tensors fit the network its metadata names
    except (AgentFileError, ConfigError, RuntimeError) as exc:
        raise UsageError(f"{path!r}: {exc}") from None
    out = args.out or os.path.join(args.run_dir, f"agent-{env_label(agent.env)}.safetensors")
    return out, data


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse(ExportArgs, argv, PROG, __doc__.split("\n")[0])
        out, data = export(args)
        folder = os.path.dirname(out)
        if folder:
            os.makedirs(folder, exist_ok=True)
        save_agent(out, data)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: cannot write the agent file: {exc}", file=sys.stderr)
        return 2
    agent = read_agent(data)
    meta = agent.meta
    counters = meta["source"]["counters"]
    version = f", weights v{counters['weights_version']}" if counters.get("weights_version") is not None else ""
    score = (
        f", eval score mean {meta['eval']['score_mean']:g}"
        if isinstance(meta.get("eval"), dict) and "score_mean" in meta["eval"]
        else ""
    )
    print(
        f"[EXPORT] {out}: {len(data):,} bytes ({len(data) / 1e6:.1f} of {MAX_BYTES / 1e6:g} MB, {meta['dtype']}), "
        f"{meta['source']['file']} of {args.run_dir}{version}{score}; env {agent.env.name} {env_label(agent.env)}, "
        f"{meta['network']['num_actions']} actions, {meta['network']['family']} network"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
