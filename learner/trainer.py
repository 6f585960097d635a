"""The DQN update: an n-step TD rule (shared/targets.py; Munchausen-DQN's on Mario), Huber loss, Adam, clipping.

One ``update()``: ``accum_steps`` micro-batches, each loss divided by ``accum_steps``, then one optimizer step; the rule
names the forward passes it needs. Every forward uses BatchNorm's running statistics (what the actors play), moved by a
no-grad train-mode pass of the trunk. bf16/fp16 cover the convolutions only; a compiled low-precision CPU learner gets
256-bit vector code. Under CUDA graphs each micro-step clones what it keeps, and gradients live in buffers zeroed in
place (pytorch/pytorch#169545). A non-finite update stops the run before the step (``NonFiniteUpdate``), except under
fp16's GradScaler, which skips it.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import numpy as np
import torch
import torch.nn.functional as F

from learner.replay.frame_ring import FrameReplay, host_array
from learner.resets import reset_network
from shared.config import AUTOS, ENV_AUTO_FIELDS, LearnerConfig, NetConfig
from shared.errors import check
from shared.network import batchnorm_trunk, build_q_network
from shared.spec import EnvSpec
from shared.targets import ONLINE_NEXT, TARGET_HERE, TARGET_NEXT, build_rule


def resolve_amp(mode: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype for ``mode`` (None: full precision, also for 'auto': the actors play an fp32 copy)."""
    dtypes = {"off": None, "auto": None, "bf16": torch.bfloat16, "fp16": torch.float16}
    if mode not in dtypes:
        raise ValueError(f"learner.amp={mode!r} must be auto, off, bf16 or fp16")
    return dtypes[mode]


def pin_cpu_vectors_to_256_bits() -> bool:
    """Have inductor write 256-bit vector code where it would pick wider, unless ``cpp.simdlen`` is set; whether it did."""
    import torch._inductor.config as inductor_config
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    if inductor_config.cpp.simdlen is not None or pick_vec_isa().bit_width() <= 256:
        return False
    inductor_config.cpp.simdlen = 256
    return True


class NonFiniteUpdate(RuntimeError):
    """An update's loss, TD errors or gradient were not finite; the optimizer step was not taken."""


def configure_cuda_backends(tf32: bool) -> None:
    """cuDNN autotuning (fixed shapes), and TF32 only where the learner already trains in low precision (``tf32``)."""
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True


@dataclass
class UpdateStats:
    loss: float
    td_error: float
    q_mean: float
    grad_norm: float


class DQNLearner:
    def __init__(
        self,
        cfg: LearnerConfig,
        spec: EnvSpec,
        device: torch.device,
        net: NetConfig | None = None,
        batchnorm_batch_stats: bool = True,
    ):
        """``cfg``: a resolved learner config (no auto left); ``net``: the network's shape (None: the defaults);
        ``batchnorm_batch_stats`` False skips the statistics pass."""
        for key in ("micro_batch", "accum_steps", *ENV_AUTO_FIELDS["learner"]):
            value = getattr(cfg, key)
            check(value not in AUTOS, f"learner.{key}", value, "is still auto: build the config with shared.resolution")
        self.cfg, self.device = cfg, device
        torch.manual_seed(cfg.seed)
        self.online = build_q_network(spec, dueling=(net or NetConfig()).dueling).to(device)
        self.target = copy.deepcopy(self.online).eval().requires_grad_(False)
        cuda = device.type == "cuda"
        self.amp_dtype = resolve_amp(cfg.amp, device)
        if cuda:
            configure_cuda_backends(tf32=self.amp_dtype is not None)
        self.scaler = torch.amp.GradScaler(device.type, enabled=self.amp_dtype == torch.float16)
        # fused: one kernel over every parameter (on a CPU about 8x the multi-tensor step), but not beside a CPU fp16 scaler
        fused = cuda or not self.scaler.is_enabled()
        self.optimizer = torch.optim.Adam(self.online.parameters(), lr=cfg.lr, eps=cfg.adam_eps, fused=fused or None)
        self.batchnorm_batch_stats = batchnorm_batch_stats
        self.rule = build_rule(cfg.rule, cfg.munchausen_alpha, cfg.munchausen_tau)  # shared/targets.py
        self.online_fn: Callable[..., torch.Tensor] = self.online  # the nets, or their torch.compile wrappers
        self.target_fn: Callable[..., torch.Tensor] = self.target
        # the statistics pass skips the head where every BatchNorm lies in the trunk: the same statistics, less work
        trunk = batchnorm_trunk(self.online)
        self.statistics_fn = cast("Callable[..., torch.Tensor]", self.online if trunk is None else self.online.trunk)
        self.cuda_graphs = cfg.compile and device.type == "cuda"
        self.cpu_vectors_pinned = bool(
            cfg.compile and device.type == "cpu" and self.amp_dtype is not None and pin_cpu_vectors_to_256_bits()
        )
        if cfg.compile:
            mode = "reduce-overhead" if self.cuda_graphs else None
            self.online_fn = torch.compile(self.online, mode=mode)
            self.target_fn = torch.compile(self.target, mode=mode)
            self.statistics_fn = torch.compile(self.statistics_fn, mode=mode)
        self.params = list(self.online.parameters())  # the same tensors for the whole run (load_state_dict copies in)
        for p in self.params:  # allocated here, outside any CUDA graph; see the module docstring
            p.grad = torch.zeros_like(p)
        self.updates = 0

    @property
    def effective_batch(self) -> int:
        return self.cfg.micro_batch * self.cfg.accum_steps

    def _autocast(self):
        return torch.autocast(self.device.type, dtype=self.amp_dtype, enabled=self.amp_dtype is not None)

    def micro_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Huber loss of one micro-batch (not yet divided), its |TD errors| and Q(s, a), all fp32 (module docstring)."""
        obs, action = batch["obs"], batch["action"].unsqueeze(1)
        if self.cuda_graphs:
            torch.compiler.cudagraph_mark_step_begin()
        q = self.target_values(batch)
        with torch.no_grad(), self._autocast():
            if self.batchnorm_batch_stats:  # a train-mode pass whose only effect is to move the running statistics
                self.online.train()
                self.statistics_fn(obs)
            self.online.eval()
            if ONLINE_NEXT in self.rule.needs:  # Double DQN's argmax (Munchausen's soft value needs none)
                q[ONLINE_NEXT] = self.online_fn(batch["next_obs"]).float().clone()
        with self._autocast():
            q_taken = self.online_fn(obs).float()
        q_sa = q_taken.gather(1, action).squeeze(1)
        target = self.rule.target(batch, self.cfg.reward_scale * batch["reward"], q)
        weight = batch.get("weight")  # importance-sampling weights of prioritized replay
        if weight is None:
            loss = F.smooth_l1_loss(q_sa, target)
        else:
            loss = (weight * F.smooth_l1_loss(q_sa, target, reduction="none")).mean()
        return loss, (q_sa - target).detach().abs(), q_sa.detach()

    def target_values(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The target net's fp32 Q at s' and, where the rule needs it, at s, by pass name: one forward over both (eval
        mode: each row on its own), cloned, as a later CUDA-graph replay may reuse its memory."""
        needs, next_obs = self.rule.needs, batch["next_obs"]
        parts = [(TARGET_NEXT, next_obs)]
        if TARGET_HERE in needs:
            parts.append((TARGET_HERE, batch["obs"]))
        with torch.no_grad(), self._autocast():
            self.target.eval()
            both = self.target_fn(torch.cat([x for _, x in parts]) if len(parts) > 1 else next_obs).float().clone()
        return dict(zip([name for name, _ in parts], both.split([len(x) for _, x in parts])))

    def update(self, replay: FrameReplay, batches: list[dict] | None = None) -> UpdateStats:
        """One optimizer step over ``accum_steps`` micro-batches (sampled from replay unless given)."""
        steps = self.cfg.accum_steps if batches is None else len(batches)
        self.optimizer.zero_grad(set_to_none=False)  # in place: .grad never becomes a CUDA-graph output
        loss_total, td_total, q_total = (torch.zeros((), device=self.device) for _ in range(3))
        prioritized = getattr(replay, "update_priorities", None)
        sampled = []
        for i in range(steps):
            batch = batches[i] if batches is not None else replay.sample(self.cfg.micro_batch)  # prioritized: its own beta
            loss, td, q = self.micro_loss(batch)
            self.scaler.scale(loss / steps).backward()
            loss_total += loss.detach()
            td_total += td.mean()
            q_total += q.mean()
            if prioritized is not None and "slot" in batch:  # the host's copy of the draw, where the replay gives one
                sampled.append((batch.get("host_stream", batch["stream"]), batch.get("host_slot", batch["slot"]), td))
        self.scaler.unscale_(self.optimizer)
        if self.cfg.max_grad_norm > 0:
            grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.cfg.max_grad_norm)
        else:
            # every .grad is a tensor: allocated in __init__, never set to None (zero_grad(set_to_none=False))
            grad_norm = torch.nn.utils.get_total_norm(cast("list[torch.Tensor]", [p.grad for p in self.params]))
        stats = torch.stack([loss_total, td_total, q_total, grad_norm.float()]).double()
        td_all = None
        if sampled:
            stream, slot, td_all = (torch.cat(parts) for parts in zip(*sampled))
            stats = torch.cat([stats, td_all.double()])
        host = stats.cpu().numpy()  # the update's one device-to-host copy: before the step, so bad gradients never land
        mean_loss, mean_td, mean_q, norm = (float(x) / d for x, d in zip(host[:4], (steps, steps, steps, 1)))
        # a non-finite TD error makes the TD figure non-finite too
        if not self.scaler.is_enabled() and not all(map(math.isfinite, (mean_loss, mean_td, mean_q, norm))):
            raise NonFiniteUpdate(self._non_finite_message(mean_loss, mean_td, mean_q, norm, host[4:]))
        if td_all is not None:  # only for a prioritized replay
            cast("Callable[..., None]", prioritized)(host_array(stream), host_array(slot), host[4:])  # one call
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.updates += 1
        return UpdateStats(mean_loss, mean_td, mean_q, norm)

    def _non_finite_message(self, loss: float, td: float, q: float, norm: float, td_all: np.ndarray) -> str:
        bad_td = "" if not len(td_all) else f" ({int((~np.isfinite(td_all)).sum())} of {td_all.size} not finite)"
        precision = f"AMP {str(self.amp_dtype).removeprefix('torch.')}" if self.amp_dtype is not None else "full precision"
        compiled = (
            "torch.compile" + (" with 256-bit CPU vectors" if self.cpu_vectors_pinned else "") if self.cfg.compile else "eager"
        )
        return (
            f"update {self.updates + 1:,} is not finite: loss {loss:.6g}, mean |TD error| {td:.6g}{bad_td}, "
            f"mean Q {q:.6g}, gradient norm {norm:.6g} ({precision}, {compiled}, on {self.device}, "
            f"lr {self.optimizer.param_groups[0]['lr']:.3g}). The step was not taken: the weights are those of "
            f"update {self.updates:,}. To tell arithmetic from divergence, rerun with --learner.amp off or "
            f"--learner.no-compile."
        )

    def sync_target(self) -> None:
        """Copy the online net's parameters and BatchNorm buffers into the target net (the loop's period)."""
        self.target.load_state_dict(self.online.state_dict())

    def reset(self, replay, batches: int = 8) -> dict[str, int]:
        """Reset the online net (learner/resets.py) on ``batches`` replay batches and sync the target to it; its counts."""
        frames = [replay.sample(self.cfg.micro_batch)["obs"] for _ in range(batches)]
        counts = reset_network(self.online, self.optimizer, self.cfg.reset_shrink, frames)
        self.sync_target()
        return counts | {"frames": batches * self.cfg.micro_batch}

    def warm_up(self, replay, updates: int = 2) -> float:
        """Compile and run ``updates`` full updates on ``replay``'s samples, then restore all state; the seconds it took."""
        start = time.perf_counter()
        saved = copy.deepcopy(self.state_dict())
        for _ in range(updates):
            self.update(replay)
        self.load_state_dict(saved)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter() - start

    def state_dict(self) -> dict:
        return {
            "online": self.online.state_dict(),
            "target": self.target.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict(),
            "updates": self.updates,
        }

    def load_state_dict(self, state: dict) -> None:
        """Load what :meth:`state_dict` saved; other keys are ignored."""
        self.online.load_state_dict(state["online"])
        self.target.load_state_dict(state["target"])
        # the saved groups' "fused" would replace ours and decide where Adam's step goes: keep this learner's own choice
        saved = state["optimizer"]
        groups = [dict(g, fused=own["fused"]) for g, own in zip(saved["param_groups"], self.optimizer.param_groups)]
        self.optimizer.load_state_dict(dict(saved, param_groups=groups))
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.updates = int(state["updates"])
