"""Metrics sinks: ``metrics.jsonl`` (one JSON object per epoch) and TensorBoard scalars.

Scalar names are namespaced (``learner/``, ``actor/``, ``replay/``, ``eval/``); the JSON file
holds the same figures under the same names, so either can be plotted (``python -m launch.tools.plot``).

Every row carries ``step`` (learner updates so far), ``env_steps`` (environment steps that reached
replay over the whole run) and ``wall_seconds`` (seconds since the run started, resumes included).
TensorBoard scalars are plotted against ``env_steps``. An epoch row holds ``learner/``, ``actor/``
and ``replay/`` figures; an evaluation row holds ``eval/`` figures.

A resumed run goes on from its checkpoint, so rows written after it (by a learner that died before its next
checkpoint) describe training that was lost: they move to ``metrics.rolled_back.jsonl`` and TensorBoard purges
its events past that point, so neither record goes back in ``env_steps``.
"""

from __future__ import annotations

import json
import os

METRICS_NAME = "metrics.jsonl"
ROLLED_BACK_NAME = "metrics.rolled_back.jsonl"


def roll_back(run_dir: str, env_steps: int) -> int:
    """Move the rows of ``metrics.jsonl`` past ``env_steps`` to ``metrics.rolled_back.jsonl`` (appended; the
    metrics file is rewritten whole, then renamed into place); returns how many moved."""
    path = os.path.join(run_dir, METRICS_NAME)
    if not os.path.isfile(path):
        return 0
    with open(path) as fh:
        lines = [line for line in fh if line.strip()]
    keep: list[str] = []
    moved: list[str] = []
    for line in lines:
        try:
            past = int(json.loads(line)["env_steps"]) > env_steps
        except (ValueError, KeyError, TypeError):  # a row cut short by the crash: not a record of anything
            past = True
        (moved if past else keep).append(line if line.endswith("\n") else line + "\n")
    if moved:
        with open(os.path.join(run_dir, ROLLED_BACK_NAME), "a") as fh:
            fh.writelines(moved)
        with open(path + ".tmp", "w") as fh:
            fh.writelines(keep)
        os.replace(path + ".tmp", path)
    return len(moved)


class MetricsLog:
    def __init__(self, run_dir: str, tensorboard: bool = True, resumed_at: int | None = None):
        """``resumed_at``: the env steps of the checkpoint a resumed run continues from (rows past it roll back)."""
        self.rolled_back = roll_back(run_dir, resumed_at) if resumed_at is not None else 0
        if self.rolled_back:
            print(
                f"[MAIN] {self.rolled_back} metrics rows past the checkpoint ({resumed_at:,} env steps) moved "
                f"to {ROLLED_BACK_NAME}: the training they describe was lost",
                flush=True,
            )
        self._file = open(os.path.join(run_dir, METRICS_NAME), "a", buffering=1)
        self._writer = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            purge = None if resumed_at is None else resumed_at + 1  # events at or past it are dropped on the next write
            self._writer = SummaryWriter(log_dir=os.path.join(run_dir, "tb"), purge_step=purge)

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
