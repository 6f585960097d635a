"""A run's replay kept across a clean stop: written beside the checkpoint, read back by the resume whose replay has
the same layout, so a resumed run does not start from an empty replay."""

from __future__ import annotations

import os

import torch

from learner.replay.frame_ring import FrameReplay

REPLAY_NAME = "replay.pt"


def save_replay(run_dir: str, replay: FrameReplay) -> None:
    """Write ``replay``'s content to the run folder (whole, then renamed into place)."""
    path = os.path.join(run_dir, REPLAY_NAME)
    torch.save(replay.state_dict(), path + ".tmp")
    os.replace(path + ".tmp", path)


def restore_replay(run_dir: str, replay: FrameReplay) -> str:
    """Load the run folder's saved replay into ``replay`` and say so, or why not; the line said ('' when none)."""
    path = os.path.join(run_dir, REPLAY_NAME)
    if not os.path.isfile(path):
        return ""
    try:
        replay.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
        line = f"[MAIN] replay restored from {path}: {len(replay):,} transitions"
    except (OSError, RuntimeError, ValueError, KeyError) as exc:
        line = f"[MAIN] the saved replay is not used ({type(exc).__name__}: {exc}); replay starts empty"
    print(line, flush=True)
    return line
