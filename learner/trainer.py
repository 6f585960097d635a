"""The DQN update: Double DQN on n-step returns, Huber loss, Adam, clipping, target sync.

One ``update()`` = ``accum_steps`` micro-batches of ``micro_batch`` samples drawn straight from
the replay on the learner's device; each micro-loss is divided by ``accum_steps`` so the summed
gradient equals the gradient of the mean loss over the concatenated batch, then one optimizer
step. Mixed precision (``amp``): bf16 autocast on GPUs that support it (no scaler needed), fp16
autocast with a GradScaler on other GPUs, off on CPU unless asked for (bf16 autocast works there).

BatchNorm, deliberately:
- online net, loss forward: train mode, so BN normalises with the micro-batch's statistics and
  updates its running averages (the usual BN training behaviour);
- online net on next states (Double DQN's argmax) and the target net: eval mode, i.e. running
  statistics, no grad. This keeps the bootstrap target independent of the batch's composition and
  costs a forward pass only (no second backward through batch statistics);
- target net: a copy of the online net's parameters *and* BN buffers at each sync;
- actors: eval mode with the broadcast running statistics, so a single env's action does not
  depend on a batch of one.
With BN in train mode, k micro-batches are not exactly one big batch (statistics differ per
micro-batch); with ``batchnorm_batch_stats=False`` they are, which the accumulation test uses.

``torch.compile`` (mode ``reduce-overhead`` on CUDA, default mode elsewhere) wraps the online
and target networks; ``warm_up()`` runs full updates (every graph, the optimizer's first step)
before the first timed epoch and reports that time apart, then restores all state, so warm-up
changes nothing a checkpoint holds.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from learner.replay import FrameReplay
from shared.config import LearnerConfig
from shared.network import QNetwork


def resolve_amp(mode: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype for ``mode`` on ``device`` (None: full precision)."""
    if mode == "off" or (mode == "auto" and device.type != "cuda"):
        return None
    if mode == "bf16":
        return torch.bfloat16
    if mode == "fp16":
        return torch.float16
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


@dataclass
class UpdateStats:
    loss: float
    td_error: float
    q_mean: float
    grad_norm: float


class DQNLearner:
    def __init__(self, cfg: LearnerConfig, in_channels: int, num_actions: int, frame_size: int,
                 device: torch.device, batchnorm_batch_stats: bool = True):
        cfg = cfg.resolved(device.type)
        self.cfg = cfg
        self.device = device
        torch.manual_seed(cfg.seed)
        self.online = QNetwork(in_channels, num_actions, frame_size).to(device)
        self.target = copy.deepcopy(self.online).eval()
        for p in self.target.parameters():
            p.requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.online.parameters(), lr=cfg.lr, eps=cfg.adam_eps)
        self.amp_dtype = resolve_amp(cfg.amp, device)
        self.scaler = torch.amp.GradScaler(device.type, enabled=self.amp_dtype == torch.float16)
        self.batchnorm_batch_stats = batchnorm_batch_stats
        self.online_fn, self.target_fn = self.online, self.target
        if cfg.compile:
            mode = "reduce-overhead" if device.type == "cuda" else None
            self.online_fn = torch.compile(self.online, mode=mode)
            self.target_fn = torch.compile(self.target, mode=mode)
        self.updates = 0
        self.compile_seconds = 0.0

    @property
    def effective_batch(self) -> int:
        return self.cfg.micro_batch * self.cfg.accum_steps

    def _autocast(self):
        return torch.autocast(self.device.type, dtype=self.amp_dtype, enabled=self.amp_dtype is not None)

    def micro_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Huber loss of one micro-batch (not yet divided), its |TD errors| and Q(s, a)."""
        with torch.no_grad(), self._autocast():
            self.online.eval()
            next_online = self.online_fn(batch["next_obs"])
            next_target = self.target_fn(batch["next_obs"])
            best = next_online.argmax(dim=1, keepdim=True)
            bootstrap = next_target.gather(1, best).squeeze(1).float()
            target = batch["reward"] + batch["discount"] * bootstrap
        self.online.train(self.batchnorm_batch_stats)
        with self._autocast():
            q = self.online_fn(batch["obs"]).gather(1, batch["action"].unsqueeze(1)).squeeze(1).float()
        loss = F.smooth_l1_loss(q, target)
        return loss, (q - target).detach().abs(), q.detach()

    def update(self, replay: FrameReplay, batches: list[dict] | None = None) -> UpdateStats:
        """One optimizer step over ``accum_steps`` micro-batches (sampled from replay unless given)."""
        steps = self.cfg.accum_steps if batches is None else len(batches)
        self.optimizer.zero_grad(set_to_none=True)
        loss_total = torch.zeros((), device=self.device)
        td_total = torch.zeros((), device=self.device)
        q_total = torch.zeros((), device=self.device)
        for i in range(steps):
            batch = replay.sample(self.cfg.micro_batch) if batches is None else batches[i]
            loss, td, q = self.micro_loss(batch)
            self.scaler.scale(loss / steps).backward()
            loss_total += loss.detach()
            td_total += td.mean()
            q_total += q.mean()
        self.scaler.unscale_(self.optimizer)
        if self.cfg.max_grad_norm > 0:
            grad_norm = torch.nn.utils.clip_grad_norm_(self.online.parameters(), self.cfg.max_grad_norm)
        else:
            grad_norm = torch.zeros((), device=self.device)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.updates += 1
        if self.updates % self.cfg.target_sync == 0:
            self.sync_target()
        loss, td, q, norm = torch.stack([loss_total, td_total, q_total, grad_norm.float()]).tolist()  # one sync
        return UpdateStats(loss / steps, td / steps, q / steps, norm)

    def sync_target(self) -> None:
        self.target.load_state_dict(self.online.state_dict())

    def warm_up(self, replay, updates: int = 2) -> float:
        """Compile and run ``updates`` full updates on samples of ``replay``, then restore every piece of
        state (nets, BN buffers, optimizer, scaler, counter): warm-up leaves nothing behind but compiled
        graphs and warm allocators. Returns the seconds it took (compile time, reported apart)."""
        start = time.perf_counter()
        saved = copy.deepcopy(self.state_dict())
        for _ in range(updates):
            self.update(replay)
        self.load_state_dict(saved)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.compile_seconds = time.perf_counter() - start
        return self.compile_seconds

    def state_dict(self) -> dict:
        return {"online": self.online.state_dict(), "target": self.target.state_dict(),
                "optimizer": self.optimizer.state_dict(), "scaler": self.scaler.state_dict(),
                "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        self.online.load_state_dict(state["online"])
        self.target.load_state_dict(state["target"])
        self.optimizer.load_state_dict(state["optimizer"])
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.updates = int(state["updates"])
