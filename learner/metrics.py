"""Metrics sinks: ``metrics.jsonl`` (one JSON object per epoch) and TensorBoard scalars.

Scalar names are namespaced (``learner/``, ``actor/``, ``replay/``, ``eval/``); the JSON file
holds the same figures under the same names, so either can be plotted (``python -m launch.plot``).

Every row carries ``step`` (learner updates so far), ``env_steps`` (environment steps that reached
replay over the whole run) and ``wall_seconds`` (seconds since the run started, resumes included).
TensorBoard scalars are plotted against ``env_steps``. An epoch row holds ``learner/``, ``actor/``
and ``replay/`` figures; an evaluation row holds ``eval/`` figures.
"""

from __future__ import annotations

import json
import os


class MetricsLog:
    def __init__(self, run_dir: str, tensorboard: bool = True):
        self._file = open(os.path.join(run_dir, "metrics.jsonl"), "a", buffering=1)
        self._writer = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter
            self._writer = SummaryWriter(log_dir=os.path.join(run_dir, "tb"))

    def write(self, step: int, env_steps: int, wall_seconds: float, scalars: dict[str, float]) -> None:
        row = {"step": int(step), "env_steps": int(env_steps), "wall_seconds": round(float(wall_seconds), 3), **scalars}
        self._file.write(json.dumps(row) + "\n")
        if self._writer is not None:
            for name, value in scalars.items():
                self._writer.add_scalar(name, value, int(env_steps), walltime=None)

    def close(self) -> None:
        self._file.close()
        if self._writer is not None:
            self._writer.close()
