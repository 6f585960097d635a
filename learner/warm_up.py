"""Before training: whether torch.compile can run here, and the stand-in batches its warm-up compiles on."""

from __future__ import annotations

import dataclasses
import shutil

import torch

from shared.config import LearnerConfig
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
    """Stands in for replay in compile warm-up: right shapes and dtypes, random content."""

    def __init__(self, spec: EnvSpec, device: torch.device):
        self.spec, self.device = spec, device

    def sample(self, batch: int) -> dict[str, torch.Tensor]:
        spec, dev = self.spec, self.device
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
        if spec.masked:  # random action masks, action 0 valid everywhere
            for key in ("mask", "next_mask"):
                out[key] = torch.rand((batch, spec.num_actions), device=dev) < 0.5
                out[key][:, 0] = True
        return out
