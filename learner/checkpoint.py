"""Checkpoints: written atomically, loadable with ``torch.load(..., weights_only=True)``.

A checkpoint is a dict of tensors and plain values: the learner's state (online and target
nets, optimizer, grad scaler, update count), the run's counters (epoch, weights_version,
inserted and trained sample counts) and the run config as JSON text. It is written to a
temporary file in the same folder, flushed and fsync'd, then renamed over ``checkpoint.pt``
with ``os.replace``, so a crash at any moment leaves the previous checkpoint whole; a leftover
temporary file is never read.
"""

from __future__ import annotations

import os

import torch

CHECKPOINT_NAME = "checkpoint.pt"


def save_checkpoint(run_dir: str, state: dict) -> str:
    path = os.path.join(run_dir, CHECKPOINT_NAME)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as fh:
        torch.save(state, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path


def load_checkpoint(run_dir: str, map_location: str | torch.device = "cpu") -> dict:
    path = os.path.join(run_dir, CHECKPOINT_NAME)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no {CHECKPOINT_NAME} in run folder {run_dir!r}")
    return torch.load(path, map_location=map_location, weights_only=True)
