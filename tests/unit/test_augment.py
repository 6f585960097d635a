"""Random-shift augmentation: every output is a crop of the edge-padded stack, one offset per sample."""

import numpy as np
import pytest
import torch

from learner.augment import SHIFT_PAD, random_shift


def _offsets(frames: np.ndarray, shifted: np.ndarray, pad: int) -> list[tuple[int, int]]:
    """Per sample, the (row, column) offset of the crop of the edge-padded stack that equals its shifted stack."""
    b, _, h, w = frames.shape
    padded = np.pad(frames, ((0, 0), (0, 0), (pad, pad), (pad, pad)), mode="edge")
    found = []
    for i in range(b):
        matches = [
            (dy, dx)
            for dy in range(2 * pad + 1)
            for dx in range(2 * pad + 1)
            if np.array_equal(padded[i, :, dy : dy + h, dx : dx + w], shifted[i])
        ]
        assert matches, f"sample {i} is no crop of its padded stack"
        found.append(matches[0])
    return found


def test_a_shift_is_a_crop_of_the_edge_padded_stack():
    torch.manual_seed(0)
    frames = torch.randint(0, 256, (64, 4, 84, 84), dtype=torch.uint8)
    shifted = random_shift(frames)
    assert shifted.shape == frames.shape and shifted.dtype == torch.uint8
    offsets = _offsets(frames.numpy(), shifted.numpy(), SHIFT_PAD)  # every frame of a stack: one offset
    assert len(set(offsets)) > 20, "64 samples should draw many of the 81 offsets"
    assert any(dy != SHIFT_PAD or dx != SHIFT_PAD for dy, dx in offsets)


def test_s_and_s_next_draw_their_offsets_independently():
    torch.manual_seed(1)
    frames = torch.randint(0, 256, (64, 4, 84, 84), dtype=torch.uint8)
    first = _offsets(frames.numpy(), random_shift(frames).numpy(), SHIFT_PAD)
    second = _offsets(frames.numpy(), random_shift(frames).numpy(), SHIFT_PAD)
    same = sum(a == b for a, b in zip(first, second))
    assert same < 16, f"{same} of 64 samples drew the same offset twice (expected about 1)"


def test_reference_by_hand_and_bad_input():
    frames = torch.arange(2 * 1 * 5 * 5, dtype=torch.float32).reshape(2, 1, 5, 5)
    assert torch.equal(random_shift(frames, pad=0), frames)
    gen = torch.Generator().manual_seed(3)
    shifted = random_shift(frames, pad=1, generator=gen)
    gen = torch.Generator().manual_seed(3)
    dy = torch.randint(0, 3, (2, 1), generator=gen).squeeze(1).tolist()
    dx = torch.randint(0, 3, (2, 1), generator=gen).squeeze(1).tolist()
    padded = np.pad(frames.numpy(), ((0, 0), (0, 0), (1, 1), (1, 1)), mode="edge")
    for i in range(2):
        assert np.array_equal(shifted[i].numpy(), padded[i, :, dy[i] : dy[i] + 5, dx[i] : dx[i] + 5])
    with pytest.raises(ValueError, match=r"frames shape \(5, 5\)"):
        random_shift(frames[0, 0])
    with pytest.raises(ValueError, match="pad -1"):
        random_shift(frames, pad=-1)
