"""Stage learner: the learner alone on a filled replay, eager, AMP and compiled, with and without accumulation."""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Literal

import numpy as np
import torch

from learner.replay.frames import FrameReplay
from shared.config import RunConfig
from shared.envs import env_spec
from shared.wire.protocol import action_dtype

# ----------------------------------------------------------------------------- learner


def _filled_replay(cfg: RunConfig, device: torch.device, streams: int = 8, per_stream: int = 4096) -> FrameReplay:
    """A replay of the run's env spec (shape, dtype, stack, masks) filled with random 200-step episodes."""
    spec = env_spec(cfg.env)
    replay = FrameReplay(
        streams,
        streams * per_stream,
        tuple(spec.obs_shape),
        spec.stack,
        cfg.replay.n_step,
        cfg.replay.gamma,
        device,
        obs_dtype=spec.obs_dtype,
        num_actions=spec.num_actions,
        masked=spec.masked,
    )
    rng = np.random.default_rng(0)
    shape = (streams, per_stream, *spec.obs_shape)
    if spec.obs_dtype == "uint8":
        frames = rng.integers(0, 256, shape, dtype=np.uint8)
    else:
        frames = rng.random(shape, dtype=np.float32).astype(spec.obs_dtype)
    actions = rng.integers(0, spec.num_actions, (streams, per_stream)).astype(action_dtype(spec.num_actions))
    masks = None
    if spec.masked:  # three quarters of the actions valid, the taken one always
        valid = rng.random((streams, per_stream, spec.num_actions)) < 0.75
        np.put_along_axis(valid, actions.astype(np.intp)[..., None], True, axis=2)
        masks = np.packbits(valid, axis=-1, bitorder="little")
    rewards = rng.normal(size=(streams, per_stream)).astype(np.float32)
    first = np.zeros((streams, per_stream), bool)
    first[:, ::200] = True  # 200-step episodes
    terminated = np.roll(first, -1, axis=1)
    replay.add(0, frames, actions, rewards, terminated, first, masks=masks)
    return replay


def reset_compiler() -> None:
    """Forget every compiled graph of this process (Dynamo caches, CUDA-graph trees) before a new compiled learner.

    Dynamo keys its cache on the code object (``QNetwork.forward``), shared by every learner the benchmark builds:
    each one adds entries guarded on its own module instance, mode and shapes, and past
    ``torch._dynamo.config.recompile_limit`` (8) entries a further guard failure runs that frame eager (one log
    warning, no error), so a later variant would be timed uncompiled. Call it only when no earlier compiled learner
    is used again."""
    torch._dynamo.reset()


def learner_stage(cfg: RunConfig, device: torch.device, updates_per_epoch: int, epochs: int) -> dict:
    """Learner alone on a filled replay: fp32 eager, AMP, AMP + compile, each without and with accumulation."""
    from learner.trainer import DQNLearner

    replay = _filled_replay(cfg, device)
    base = cfg.learner.resolved(device.type)  # the env's own target (Mario: Munchausen), as it trains
    amp: Literal["auto", "bf16"] = "auto" if device.type == "cuda" else "bf16"
    variants: list[tuple[str, Literal["auto", "off", "bf16", "fp16"], bool]] = [
        ("fp32_eager", "off", False),
        ("amp_eager", amp, False),
        ("amp_compiled", amp, True),
    ]
    out: dict = {"device": str(device), "micro_batch": base.micro_batch}
    for name, amp_mode, compiled in variants:
        for accum in (1, 4):
            lc = dataclasses.replace(base, accum_steps=accum, amp=amp_mode, compile=compiled)
            if compiled:  # a fresh Dynamo state per compiled variant: see reset_compiler
                reset_compiler()
            dqn = DQNLearner(lc, env_spec(cfg.env), device, env=cfg.env, dueling=cfg.net.dueling)
            compile_s = dqn.warm_up(replay) if compiled else 0.0
            if not compiled:
                dqn.warm_up(replay)  # eager warm-up too: allocator, kernels, the optimizer's first step
            rates = []
            for _ in range(epochs):
                start = time.perf_counter()
                for _ in range(updates_per_epoch):
                    dqn.update(replay)
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                rates.append(updates_per_epoch / (time.perf_counter() - start))
            steady = statistics.mean(rates[1:]) if len(rates) > 1 else rates[0]
            key = f"{name}_accum{accum}"
            out[key] = {
                "updates_per_s": steady,
                "samples_per_s": steady * dqn.effective_batch,
                "effective_batch": dqn.effective_batch,
                "compile_seconds": compile_s,
                "first_epoch_ratio": rates[0] / steady,
            }
            print(
                f"learner {key}: {steady * dqn.effective_batch:,.0f} samples/s, {steady:.2f} updates/s, "
                f"first epoch {rates[0] / steady:.0%} of steady, compile {compile_s:.1f}s",
                flush=True,
            )
    for accum in (1, 4):
        out[f"speedup_amp_compiled_vs_fp32_accum{accum}"] = (
            out[f"amp_compiled_accum{accum}"]["samples_per_s"] / out[f"fp32_eager_accum{accum}"]["samples_per_s"]
        )
    return out
