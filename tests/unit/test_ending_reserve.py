"""EndingReserve: each termination's segment, copied exactly, sampled by FrameReplay's rules, mixed into batches."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from learner.ending_reserve import EndingReserve
from learner.prioritized_replay import PrioritizedReplay
from learner.replay import FrameReplay
from tests.unit.test_replay import CHUNKS_A, CHUNKS_B, SHAPE, RefStream, assert_row_matches, fill_two_actors

STACK, N, GAMMA, C, STEPS = 4, 3, 0.9, 37, 5
HISTORY = STACK - 1 + STEPS


def frame_slot(frame: torch.Tensor) -> tuple[int, int]:
    """(stream, slot) that test_replay.make_frame encoded in a frame's first bytes."""
    flat = frame.reshape(-1)
    return int(flat[0]), int(flat[1]) + 256 * int(flat[2])


def expected_endings(refs: list[RefStream]) -> set[tuple[int, int]]:
    """The (stream, slot) of every termination fill_two_actors writes whose history the ring still holds then."""
    out = set()
    for g, chunks in enumerate((CHUNKS_A, CHUNKS_B)):
        pos = 0
        for T in chunks:
            for s in (2 * g, 2 * g + 1):
                for d in range(pos, pos + T):
                    if refs[s].terminated[d] and d - HISTORY + 1 >= max(0, pos + T - C):
                        out.add((s, d))
            pos += T
    return out


def held_endings(reserve: EndingReserve) -> list[tuple[int, int]]:
    """(stream, slot) of the terminating step of each held segment."""
    return [frame_slot(reserve._frames[m, HISTORY - 1]) for m in range(reserve.endings_held())]


def test_segments_are_exact_copies_and_sample_like_the_ring():
    rng = np.random.default_rng(5)
    refs = [RefStream(rng, s, 500, STACK) for s in range(4)]
    replay = FrameReplay(4, 4 * C, frame_shape=SHAPE, stack=STACK, n_step=N, gamma=GAMMA)
    reserve = EndingReserve(replay, segments=1000, steps=STEPS)
    replay.attach_endings(reserve, 0.25)
    fill_two_actors(replay, refs)

    want = expected_endings(refs)
    held = held_endings(reserve)
    assert len(want) > 50 and sorted(held) == sorted(want) and reserve.kept == len(want)
    for m, (s, d) in enumerate(held):  # every slot of the segment: frame and flags as in the stream, then padding
        for j in range(HISTORY):
            k = d - HISTORY + 1 + j
            assert frame_slot(reserve._frames[m, j]) == (s, k)
            assert bool(reserve._terminated[m, j]) == refs[s].terminated[k]
            assert bool(reserve._first[m, j]) == refs[s].first[k]
            assert int(reserve._actions[m, j]) == refs[s].action[k]
        assert reserve._first[m, HISTORY:].all() and not reserve._terminated[m, HISTORY:].any()
    assert reserve.num_sampleable() == STEPS * len(want)

    batch = reserve.sample(2048, generator=torch.Generator().manual_seed(0))
    seen = set()
    for b in range(2048):
        s, i = frame_slot(batch["obs"][b, -1])
        assert any((s, d) in want for d in range(i, i + STEPS)), (s, i)  # one of the STEPS before an ending
        assert_row_matches(batch, b, refs[s], i, N, GAMMA)
        seen.add((s, i))
    assert len(seen) > STEPS * len(want) // 2


def episodes(count: int, length: int) -> dict[str, np.ndarray]:
    """One stream of ``count`` episodes of ``length`` steps, each ending in a termination, as [1, T] arrays."""
    T = count * length
    frames = np.stack([np.full(SHAPE, k, dtype=np.uint8) for k in range(T)])
    k = np.arange(T)
    return {"frames": frames[None], "actions": (k % 7).astype(np.uint8)[None],
            "rewards": np.ones((1, T), dtype=np.float32), "terminated": (k % length == length - 1)[None],
            "first": (k % length == 0)[None]}


def test_the_oldest_ending_is_replaced_and_masks_are_copied():
    replay = FrameReplay(1, 200, frame_shape=SHAPE, stack=STACK, n_step=N, num_actions=10, masked=True)
    reserve = EndingReserve(replay, segments=3, steps=STEPS)
    replay.attach_endings(reserve, 0.5)
    data = episodes(5, 10)
    masks = np.random.default_rng(0).random((1, 50, 10)) < 0.5
    masks[..., 0] = True
    replay.add(0, data["frames"], data["actions"], data["rewards"], data["terminated"], data["first"], masks=masks)
    assert reserve.kept == 5 and reserve.endings_held() == 3
    assert sorted(int(reserve._frames[m, HISTORY - 1, 0, 0]) for m in range(3)) == [29, 39, 49]
    for m in range(3):
        for j in range(HISTORY):
            k = int(reserve._frames[m, j, 0, 0])
            assert torch.equal(reserve._masks[m, j], replay._masks[0, k])


def test_sample_mixes_a_share_of_endings_that_carry_no_priority():
    replay = PrioritizedReplay(1, 200, frame_shape=SHAPE, stack=STACK, n_step=N)
    replay.attach_endings(EndingReserve(replay, segments=4, steps=STEPS), 0.25)
    data = episodes(1, 30)
    data["terminated"][:] = False  # no ending yet: every row comes from the ring
    replay.add(0, **data)
    batch = replay.sample(8, generator=torch.Generator().manual_seed(1), beta=0.5)
    assert (batch["stream"] == 0).all() and tuple(batch["obs"].shape) == (8, STACK, *SHAPE)

    replay.add(0, **episodes(1, 30))  # one ending, at absolute slot 59
    batch = replay.sample(8, generator=torch.Generator().manual_seed(2), beta=0.5)
    assert batch["stream"].tolist()[6:] == [-1, -1] and (batch["stream"][:6] == 0).all()
    assert (batch["slot"][6:] == -1).all() and (batch["weight"][6:] == 1).all()
    assert {k: tuple(v.shape)[0] for k, v in batch.items()} == dict.fromkeys(batch, 8)
    assert all(25 <= int(batch["obs"][b, -1, 0, 0]) <= 29 for b in (6, 7))  # frames k of the last STEPS steps
    before = replay._prio.copy()
    assert replay.update_priorities(batch["stream"], batch["slot"], torch.full((8,), 5.0)) == 6
    changed = np.flatnonzero(replay._prio != before)
    assert set(changed.tolist()) == set(batch["slot"][:6].tolist())  # one stream: leaf = absolute slot % C
    replay.attach_endings(replay.endings, 0.9)
    assert replay.sample(1)["stream"].tolist() == [0]  # a share never takes the whole batch


def test_reserve_and_share_refuse_what_they_cannot_do():
    replay = FrameReplay(1, 100, frame_shape=SHAPE, stack=STACK, n_step=N)
    with pytest.raises(ValueError, match="segments=0"):
        EndingReserve(replay, segments=0, steps=STEPS)
    with pytest.raises(ValueError, match="steps=0"):
        EndingReserve(replay, segments=2, steps=0)
    with pytest.raises(ValueError, match="share=1.0"):
        replay.attach_endings(EndingReserve(replay, segments=2, steps=STEPS), 1.0)
    other = FrameReplay(1, 100, frame_shape=SHAPE, stack=STACK, n_step=N)
    with pytest.raises(ValueError, match="copy from this replay"):
        replay.attach_endings(EndingReserve(other, segments=2, steps=STEPS), 0.1)
