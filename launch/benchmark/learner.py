"""Stage learner: the learner alone on a filled replay."""

from __future__ import annotations

import dataclasses
import functools
import statistics
import time
from collections.abc import Callable
from typing import Any, Literal, cast

import numpy as np
import torch

from learner.replay.frame_ring import FrameReplay
from learner.replay.prioritized import PrioritizedReplay
from shared.config import RunConfig
from shared.envs import env_spec
from shared.wire.protocol import action_dtype


def _filled_replay(cfg: RunConfig, device: torch.device, prioritized: bool) -> FrameReplay:
    """A replay of the run's env spec filled with random 200-step episodes; prioritized (alpha, eps) with random priorities."""
    spec, streams, per_stream = env_spec(cfg.env), 8, 4096
    kind: type[FrameReplay] = PrioritizedReplay if prioritized else FrameReplay
    extra: dict[str, Any] = {"alpha": cfg.replay.priority_alpha, "eps": cfg.replay.priority_eps} if prioritized else {}
    extra.update(obs_dtype=spec.obs_dtype, num_actions=spec.num_actions, masked=spec.masked)
    replay = kind(
        streams, streams * per_stream, tuple(spec.obs_shape), spec.stack, cfg.replay.n_step, cfg.replay.gamma, device, **extra
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
    priorities = rng.exponential(size=(streams, per_stream)).astype(np.float32) if prioritized else None
    replay.add(0, frames, actions, rewards, terminated, first, priorities=priorities, masks=masks)
    return replay


def reset_compiler() -> None:
    """Forget every compiled graph of this process before a new compiled learner: past Dynamo's recompile limit on
    the ``QNetwork.forward`` they share, a later variant would be timed eager. Only when no earlier one is used again."""
    torch._dynamo.reset()


def _measure(dqn, replay: FrameReplay, updates_per_epoch: int, epochs: int, compile_s: float) -> dict:
    """Updates per second over ``epochs`` timed epochs: the first epoch's against the mean of the rest (steady)."""
    rates = []
    for _ in range(epochs):
        start = time.perf_counter()
        for _ in range(updates_per_epoch):
            dqn.update(replay)
        if dqn.device.type == "cuda":
            torch.cuda.synchronize(dqn.device)
        rates.append(updates_per_epoch / (time.perf_counter() - start))
    steady = statistics.mean(rates[1:]) if len(rates) > 1 else rates[0]
    return {
        "updates_per_s": steady,
        "samples_per_s": steady * dqn.effective_batch,
        "effective_batch": dqn.effective_batch,
        "compile_seconds": compile_s,
        "first_epoch_ratio": rates[0] / steady,
    }


def rates_text(figures: dict) -> str:
    """A learner row's rates as printed and in the table."""
    return f"{figures['samples_per_s']:,.0f} samples/s, {figures['updates_per_s']:.2f} updates/s"


def update_split(dqn, replay: FrameReplay, reps: int) -> dict[str, float]:
    """Median ms per update of each part of ``dqn.update``, each timed on its own; ``loss`` includes ``targets`` and the
    BatchNorm passes (``bn_stats*``), ``step_and_rest`` is the rest (clipping, the optimizer, the host copy, Python)."""
    cuda = dqn.device.type == "cuda"
    prioritized = hasattr(replay, "update_priorities")

    def timed(fn) -> float:
        times = []
        for _ in range(reps):
            if cuda:
                torch.cuda.synchronize(dqn.device)
            start = time.perf_counter()
            fn()
            if cuda:
                torch.cuda.synchronize(dqn.device)
            times.append(time.perf_counter() - start)
        return 1000.0 * statistics.median(times)

    B, accum = dqn.cfg.micro_batch, dqn.cfg.accum_steps
    draw = lambda: replay.sample(B)  # noqa: E731 - a prioritized replay at its own beta
    batch = draw()
    obs = batch["obs"]

    def bn_pass(net: Callable[..., torch.Tensor]) -> None:
        with torch.no_grad(), dqn._autocast():
            dqn.online.train()
            net(obs)
            dqn.online.eval()

    def loss_and_backward() -> None:
        loss, _, _ = dqn.micro_loss(batch)
        loss.backward()

    _, td, _ = dqn.micro_loss(batch)

    def priorities() -> None:  # the write-back as update() makes it: host (stream, slot, |TD error|)
        cast(PrioritizedReplay, replay).update_priorities(batch["stream"].cpu(), batch["slot"].cpu(), td.cpu())

    parts = {
        "sample": accum * timed(draw),
        "targets": accum * timed(lambda: dqn.target_values(batch)),
        "bn_stats": accum * timed(functools.partial(bn_pass, dqn.statistics_fn)) if dqn.batchnorm_batch_stats else 0.0,
        "bn_stats_whole_net": accum * timed(functools.partial(bn_pass, dqn.online_fn)) if dqn.batchnorm_batch_stats else 0.0,
        "loss": accum * timed(lambda: dqn.micro_loss(batch)),
        "backward": 0.0,
        "priorities": timed(priorities) if prioritized else 0.0,
    }
    parts["backward"] = max(accum * timed(loss_and_backward) - parts["loss"], 0.0)
    dqn.optimizer.zero_grad(set_to_none=False)
    total = timed(lambda: dqn.update(replay))
    parts["step_and_rest"] = max(total - parts["sample"] - parts["loss"] - parts["backward"] - parts["priorities"], 0.0)
    parts["total"] = total
    return parts


def learner_stage(cfg: RunConfig, device: torch.device, updates_per_epoch: int, epochs: int) -> dict:
    """The learner as a run sets it on prioritized and uniform replay, where an update's time goes (``split``), and fp32
    eager, AMP and AMP + compile, each without and with accumulation."""
    from learner.trainer import DQNLearner

    replays = {"prioritized": _filled_replay(cfg, device, True), "uniform": _filled_replay(cfg, device, False)}
    base = cfg.learner.resolved(device.type)  # the env's own target (Mario: Munchausen), as it trains
    out: dict = {"device": str(device), "micro_batch": base.micro_batch}
    spec = env_spec(cfg.env)
    if base.compile:
        reset_compiler()
    dqn = DQNLearner(base, spec, device, cfg.net)  # one learner (one compile) for both
    compile_s = dqn.warm_up(replays["prioritized"]) if base.compile else 0.0
    for kind, replay in replays.items():  # the run's own settings on both replays, then where an update's time goes
        if not base.compile:
            dqn.warm_up(replay)
        out[f"run_{kind}"] = _measure(dqn, replay, updates_per_epoch, epochs, compile_s)
        if kind == "prioritized":
            out["split"] = update_split(dqn, replay, max(updates_per_epoch, 5))
        print(f"learner run_{kind} (amp {base.amp}, compile {base.compile}): {rates_text(out[f'run_{kind}'])}", flush=True)
    print("learner split (ms per update): " + ", ".join(f"{k} {v:.2f}" for k, v in out["split"].items()), flush=True)
    # The AMP variants autocast whatever the run's default (learner.amp auto is full precision): bf16, or fp16 with its
    # gradient scaler on a GPU without bf16.
    amp: Literal["bf16", "fp16"] = "fp16" if device.type == "cuda" and not torch.cuda.is_bf16_supported() else "bf16"
    variants: list[tuple[str, Literal["auto", "off", "bf16", "fp16"], bool]] = [
        ("fp32_eager", "off", False),
        ("amp_eager", amp, False),
        ("amp_compiled", amp, True),
    ]
    replay = replays["prioritized"]
    for name, amp_mode, compiled in variants:
        for accum in (1, 4):
            lc = dataclasses.replace(base, accum_steps=accum, amp=amp_mode, compile=compiled)
            if compiled:  # a fresh Dynamo state per compiled variant: see reset_compiler
                reset_compiler()
            dqn = DQNLearner(lc, spec, device, cfg.net)
            compile_s = dqn.warm_up(replay)  # eager too: allocator, kernels, the optimizer's first step
            key = f"{name}_accum{accum}"
            v = out[key] = _measure(dqn, replay, updates_per_epoch, epochs, compile_s if compiled else 0.0)
            print(
                f"learner {key}: {rates_text(v)}, first epoch {v['first_epoch_ratio']:.0%} of steady, "
                f"compile {v['compile_seconds']:.1f}s",
                flush=True,
            )
    for accum in (1, 4):
        amp_rate, fp32_rate = (out[f"{name}_accum{accum}"]["samples_per_s"] for name in ("amp_compiled", "fp32_eager"))
        out[f"speedup_amp_compiled_vs_fp32_accum{accum}"] = amp_rate / fp32_rate
    return out
