"""Catch (bsuite): a tiny pixel game that DQN solves in minutes, to prove the whole pipeline learns.

The game: docs/envs/catch.md; score: the return, success: the ball caught.
"""

from __future__ import annotations

import cv2
import numpy as np

from shared.envs import frame_entry, register

ROWS, COLS = 10, 5
NUM_ACTIONS = 3
ACTION_NAMES = ["left", "stay", "right"]


class CatchEnv:
    num_actions = NUM_ACTIONS

    def __init__(self, frame_size: int, seed: int, max_episode_steps: int = 0):
        self.frame_shape = (frame_size, frame_size)
        self._rng = np.random.default_rng(seed)
        self._limit = max_episode_steps

    def _render(self) -> np.ndarray:
        board = np.zeros((ROWS, COLS), np.uint8)
        board[self._ball_row, self._ball_col] = 255
        board[ROWS - 1, self._paddle] = 255
        return cv2.resize(board, self.frame_shape[::-1], interpolation=cv2.INTER_NEAREST)

    def reset(self, seed: int | None = None) -> np.ndarray:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._ball_row, self._ball_col = 0, int(self._rng.integers(COLS))
        self._paddle = COLS // 2
        return self._render()

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        if not 0 <= int(action) < NUM_ACTIONS:
            raise ValueError(f"action {action!r} out of range [0, {NUM_ACTIONS})")
        self._paddle = min(COLS - 1, max(0, self._paddle + int(action) - 1))
        self._ball_row += 1  # one row per step: the row counts the episode's steps
        terminated = self._ball_row == ROWS - 1
        reward = (1.0 if self._paddle == self._ball_col else -1.0) if terminated else 0.0
        truncated = not terminated and self._limit > 0 and self._ball_row >= self._limit
        info = {"score": reward, "success": terminated and reward > 0}
        return self._render(), reward, terminated, truncated, info

    def close(self) -> None:
        pass


ENTRY = register(
    frame_entry(
        "catch",
        lambda cfg, seed: CatchEnv(cfg.frame_size, seed, cfg.max_episode_steps),
        lambda cfg: list(ACTION_NAMES),
        score="Return",
        success="Caught",
        noop_action=lambda cfg: ACTION_NAMES.index("stay"),
    )
)
