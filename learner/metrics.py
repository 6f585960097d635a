"""Metrics sinks: ``metrics.jsonl`` (one JSON object per epoch) and TensorBoard scalars.

Rows carry ``step`` (updates), ``env_steps`` (TensorBoard's x axis) and ``wall_seconds`` (resumes included) besides the
namespaced figures (``learner/``, ``actor/``, ``replay/``, ``eval/``). A resume moves rows past its checkpoint to
``metrics.rolled_back.jsonl`` and purges TensorBoard past it, so neither goes back in ``env_steps``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import time
from typing import Any

from shared.writes import RefusedWrites

METRICS_NAME = "metrics.jsonl"
ROLLED_BACK_NAME = "metrics.rolled_back.jsonl"


class MetricsLog:
    """Appends rows to metrics.jsonl and scalars to TensorBoard; a refused write is said and its row left out whole."""

    TB_RETRY_S = 60.0

    def __init__(
        self, run_dir: str, tensorboard: bool = True, resumed_at: int | None = None, refused: RefusedWrites | None = None
    ):
        """``resumed_at``: the env steps of the checkpoint a resumed run continues from (rows past it roll back)."""
        self.run_dir, self.tensorboard, self._resumed_at = run_dir, tensorboard, resumed_at
        self.refused = refused if refused is not None else RefusedWrites(lambda line: print(line, flush=True))
        self.rolled_back = 0
        if resumed_at is not None:
            self.refused.attempt("the metrics roll-back", self._roll_back, resumed_at)
        self._fd = os.open(os.path.join(run_dir, METRICS_NAME), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._writer: Any = None
        self._tb_retry_at = 0.0
        self._open_tensorboard()

    def _roll_back(self, resumed_at: int) -> None:
        """Move ``metrics.jsonl``'s rows past ``resumed_at`` env steps to ``metrics.rolled_back.jsonl``, and say so."""
        path = os.path.join(self.run_dir, METRICS_NAME)
        if not os.path.isfile(path):
            return
        keep: list[str] = []
        moved: list[str] = []
        with open(path) as fh:
            for line in filter(str.strip, fh):
                try:
                    past = int(json.loads(line)["env_steps"]) > resumed_at
                except (ValueError, KeyError, TypeError):  # a row cut short by the crash: not a record of anything
                    past = True
                (moved if past else keep).append(line if line.endswith("\n") else line + "\n")
        if not moved:
            return
        with open(os.path.join(self.run_dir, ROLLED_BACK_NAME), "a") as fh:
            fh.writelines(moved)
        with open(path + ".tmp", "w") as fh:
            fh.writelines(keep)
        os.replace(path + ".tmp", path)
        self.rolled_back = len(moved)
        print(
            f"[MAIN] {self.rolled_back} metrics rows past the checkpoint ({resumed_at:,} env steps) moved "
            f"to {ROLLED_BACK_NAME}: the training they describe was lost",
            flush=True,
        )

    def _open_tensorboard(self) -> None:
        if not self.tensorboard or self._writer is not None or time.monotonic() < self._tb_retry_at:
            return
        from torch.utils.tensorboard import SummaryWriter

        purge = None if self._resumed_at is None else self._resumed_at + 1  # events at or past it go on the next write
        path = os.path.join(self.run_dir, "tb")
        if not self.refused.attempt("TensorBoard", self._set_writer, SummaryWriter, path, purge):
            self._tb_retry_at = time.monotonic() + self.TB_RETRY_S

    def _set_writer(self, make: Any, path: str, purge: int | None) -> None:
        self._writer = make(log_dir=path, purge_step=purge)

    def _append(self, data: bytes) -> None:
        at = os.lseek(self._fd, 0, os.SEEK_END)
        try:
            if os.write(self._fd, data) != len(data):
                raise OSError(errno.ENOSPC, "metrics row written in part")
        except OSError:
            os.ftruncate(self._fd, at)  # no half row in the file
            raise

    def _scalars(self, scalars: dict[str, float], env_steps: int) -> None:
        for name, value in scalars.items():
            self._writer.add_scalar(name, value, env_steps, walltime=None)

    def write(self, step: int, env_steps: int, wall_seconds: float, scalars: dict[str, float]) -> None:
        row = {"step": int(step), "env_steps": int(env_steps), "wall_seconds": round(float(wall_seconds), 3), **scalars}
        self.refused.attempt("a metrics row", self._append, (json.dumps(row) + "\n").encode())
        self._open_tensorboard()
        if self._writer is not None and not self.refused.attempt("TensorBoard", self._scalars, scalars, int(env_steps)):
            with contextlib.suppress(Exception):  # a writer that failed once stays failed: open a new one later
                self._writer.close()
            self._writer, self._tb_retry_at = None, time.monotonic() + self.TB_RETRY_S

    def close(self) -> None:
        os.close(self._fd)
        if self._writer is not None:
            with contextlib.suppress(OSError, RuntimeError):
                self._writer.close()
