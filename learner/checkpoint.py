"""Checkpoints: written atomically, loadable with ``torch.load(..., weights_only=True)``.

A checkpoint is a dict of tensors and plain values: the learner's state (online and target
nets, optimizer, grad scaler, update count), the run's counters (epoch, weights_version,
inserted and trained sample counts) and the run config as JSON text. It is written to a
temporary file in the same folder, flushed and fsync'd, then renamed over ``checkpoint.pt``
with ``os.replace``, so a crash at any moment leaves the previous checkpoint whole; a leftover
temporary file is never read, and a resume removes it (``discard_partial``).

Every published weights version is also recorded in ``weights_version`` (same atomic write), so a
learner killed after publishing but before its next checkpoint resumes above every version its
actors may hold.

``best.pt`` (same atomic write) holds the weights that scored highest so far in the evaluation
during training: ``learner.online`` (the evaluated state dict, BatchNorm statistics included),
``counters`` (updates, inserted = env steps, weights_version, wall_seconds at the request),
``eval`` (the summary it scored, ranked by flag rate, then mean x_pos) and ``config``. It has the
checkpoint's layout, so ``launch.evaluate`` plays it like one (``--net best``).

``snapshots/v{weights_version}.pt`` (same layout and atomic write) hold the ``eval.keep_snapshots``
best-scoring evaluated weights of the run. An in-training score is the best of many noisy estimates, so
at the end of a run (launch/final_eval.py) they play fresh episodes and the best of those becomes
``best.pt``, with the fresh score in its ``eval``.
"""

from __future__ import annotations

import glob
import os

import torch

CHECKPOINT_NAME = "checkpoint.pt"
BEST_NAME = "best.pt"
PUBLISHED_NAME = "weights_version"
SNAPSHOT_DIR = "snapshots"


def _save_atomic(path: str, state: dict) -> str:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as fh:
        torch.save(state, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path


def save_checkpoint(run_dir: str, state: dict) -> str:
    return _save_atomic(os.path.join(run_dir, CHECKPOINT_NAME), state)


def save_best(run_dir: str, state: dict) -> str:
    """Write ``best.pt`` (layout in the module docstring)."""
    return _save_atomic(os.path.join(run_dir, BEST_NAME), state)


def load_best(run_dir: str) -> dict | None:
    """``best.pt`` of ``run_dir``, or None when there is none or it cannot be read."""
    path = os.path.join(run_dir, BEST_NAME)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # none yet, or a foreign file: the next better evaluation replaces it
        return None


def snapshot_path(run_dir: str, weights_version: int) -> str:
    return os.path.join(run_dir, SNAPSHOT_DIR, f"v{int(weights_version)}.pt")


def save_snapshot(run_dir: str, state: dict) -> str:
    """Write an evaluated snapshot (``best.pt``'s layout) named by its ``counters.weights_version``."""
    os.makedirs(os.path.join(run_dir, SNAPSHOT_DIR), exist_ok=True)
    return _save_atomic(snapshot_path(run_dir, state["counters"]["weights_version"]), state)


def load_snapshots(run_dir: str) -> list[dict]:
    """Every readable snapshot of ``run_dir``, best in-training score first (``best_score`` of its ``eval``)."""
    found = []
    for path in glob.glob(os.path.join(glob.escape(run_dir), SNAPSHOT_DIR, "v*.pt")):
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception:  # a foreign or damaged file is not a candidate
            continue
        if isinstance(state, dict) and "eval" in state:
            found.append(state | {"path": path})
    return sorted(found, key=lambda st: best_score(st["eval"]), reverse=True)


def best_score(summary: dict) -> tuple[float, float]:
    """How evaluation summaries rank for ``best.pt``: flag rate first, then mean x_pos."""
    return float(summary["flag_rate"]), float(summary["x_pos_mean"])


def load_checkpoint(run_dir: str, map_location: str | torch.device = "cpu") -> dict:
    path = os.path.join(run_dir, CHECKPOINT_NAME)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no {CHECKPOINT_NAME} in run folder {run_dir!r}")
    return torch.load(path, map_location=map_location, weights_only=True)


def discard_partial(run_dir: str) -> list[str]:
    """Remove temporary files a crashed save left behind; returns their paths."""
    folder = glob.escape(run_dir)
    leftovers = sorted([name for base in (CHECKPOINT_NAME, BEST_NAME, PUBLISHED_NAME)
                        for name in glob.glob(os.path.join(folder, f"{base}.tmp-*"))]
                       + glob.glob(os.path.join(folder, SNAPSHOT_DIR, "*.pt.tmp-*")))
    for path in leftovers:
        os.remove(path)
    return leftovers


def record_published(run_dir: str, version: int) -> None:
    """Atomically note ``version`` as the newest weights version handed to actors."""
    path = os.path.join(run_dir, PUBLISHED_NAME)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as fh:
        fh.write(f"{int(version)}\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def read_published(run_dir: str) -> int:
    """The newest weights version recorded by ``record_published`` (-1: none)."""
    try:
        with open(os.path.join(run_dir, PUBLISHED_NAME)) as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return -1
