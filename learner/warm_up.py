"""Before training: whether torch.compile can run here, and the stand-in batches its warm-up compiles on."""

from __future__ import annotations

import dataclasses
import shutil

import torch

from shared.config import LearnerConfig, ReplayConfig
from shared.spec import EnvSpec

COMPILERS = {"cpu": ("g++", "c++", "clang++"), "cuda": ("cc", "gcc", "clang")}  # torch.compile's: C++ on CPU, C for Triton


def missing_compiler(device_type: str) -> str:
    """Why torch.compile cannot run on ``device_type`` here ('' if it can): no compiler on PATH to build its code."""
    if any(map(shutil.which, COMPILERS.get(device_type, COMPILERS["cuda"]))):
        return ""
    what = "a C++ compiler" if device_type == "cpu" else "a C compiler (for Triton)"
    return f"no compiler on PATH: torch.compile needs {what} on {device_type}, so the learner runs eager"


def compile_setting(cfg: LearnerConfig, train: bool, device_type: str) -> LearnerConfig:
    """``cfg`` with compile off where it cannot or need not run: collecting only, or no compiler here (said)."""
    if not cfg.compile or (train and not (why := missing_compiler(device_type))):
        return cfg
    if train:
        print(f"[MAIN] {why}", flush=True)
    return dataclasses.replace(cfg, compile=False)


class SyntheticReplay:
    """Stands in for replay in compile warm-up: right shapes and dtypes, random content (``windows``: the window's too)."""

    def __init__(self, spec: EnvSpec, replay: ReplayConfig, device: torch.device, windows: bool = False):
        self.spec, self.replay, self.device, self.windows = spec, replay, device, windows

    def sample(self, batch: int) -> dict[str, torch.Tensor]:
        spec, dev, n = self.spec, self.device, self.replay.n_step
        shape = (batch, *spec.input_shape)
        if spec.obs_dtype == "uint8":
            obs = torch.randint(0, 256, shape, dtype=torch.uint8, device=dev)
        else:
            obs = torch.rand(shape, device=dev).to(getattr(torch, spec.obs_dtype))
        out = {
            "obs": obs,
            "next_obs": obs.clone(),
            "action": torch.randint(0, spec.num_actions, (batch,), device=dev),
            "reward": torch.zeros(batch, device=dev),
            "discount": torch.full((batch,), 0.99, device=dev),
        }
        if self.windows:
            window_action = torch.randint(0, spec.num_actions, (batch, n), device=dev)
            window_action[:, 0] = out["action"]
            weight = self.replay.gamma ** torch.arange(n, device=dev, dtype=torch.float32)
            out |= {
                "window_obs": obs.unsqueeze(1).expand(batch, n - 1, *obs.shape[1:]).clone(),
                "window_action": window_action,
                "window_weight": weight.expand(batch, n).clone(),
            }
        if spec.masked:
            out |= self._masks(batch, out["action"], out.get("window_action"))
        return out

    def _masks(self, batch: int, action: torch.Tensor, window_action: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """Random action masks, every action valid where it was taken (and action 0 everywhere)."""
        n, dev, a = self.replay.n_step, self.device, self.spec.num_actions
        shapes = {"mask": (batch, a), "next_mask": (batch, a)} | ({"window_mask": (batch, n - 1, a)} if self.windows else {})
        out = {key: torch.rand(shape, device=dev) < 0.5 for key, shape in shapes.items()}
        for mask in out.values():
            mask[..., 0] = True
        if window_action is not None:
            rows = torch.arange(batch, device=dev)
            out["mask"][rows, action] = True
            out["window_mask"][rows[:, None], torch.arange(n - 1, device=dev)[None, :], window_action[:, 1:]] = True
        return out
