"""Metrics sinks: ``metrics.jsonl`` (one JSON object per epoch) and TensorBoard scalars.

Scalar names are namespaced (``learner/``, ``actor/``, ``replay/``, ``net/``); the JSON file
holds the same figures under the same names, so either can be plotted.
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

    def write(self, step: int, scalars: dict[str, float]) -> None:
        self._file.write(json.dumps({"step": step, **scalars}) + "\n")
        if self._writer is not None:
            for name, value in scalars.items():
                self._writer.add_scalar(name, value, step)

    def close(self) -> None:
        self._file.close()
        if self._writer is not None:
            self._writer.close()
