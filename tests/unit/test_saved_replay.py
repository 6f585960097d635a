"""A replay saved with its checkpoint (learner/replay/saved.py): an exact round trip of rings, heads and priorities that
samples as the original did; a stale, empty, incomplete, garbage or truncated save refused in one line, the replay left
empty and nothing raised; a save that fails midway leaves no temporary folder and the previous replay whole; the
learner's periodic save carries its checkpoint's stamp, and its last checkpoint removes a replay it made stale."""

import errno
import glob
import json
import os

import numpy as np
import pytest
import torch

from learner.checkpoint import Checkpointer, load_checkpoint
from learner.replay import saved
from learner.replay.frame_ring import FrameReplay
from learner.replay.prioritized import PrioritizedReplay
from learner.replay.saved import (
    LEGACY_NAME,
    REPLAY_DIR,
    STAMP_NAME,
    discard_stale_replay,
    replay_stamp,
    restore_replay,
    save_replay,
    write_replay,
)
from shared.config import ConfigError, LearnerConfig
from shared.writes import RefusedWrites

H, W, S, C, A = 4, 3, 3, 24, 5  # frame shape, streams, slots per stream, actions
STAMP = {"run": 7, "epoch": 3, "updates": 50, "inserted": 1000, "samples_trained": 800}
# per stream, the lengths of its adds: streams 0 and 1 wrap their rings, stream 2 writes once and then expires
LENGTHS = {0: [7, 20, 13, 20], 1: [11, 20, 20, 10], 2: [9]}


def make(kind=FrameReplay, device="cpu", streams=S):
    extra = {"alpha": 0.7, "eps": 1e-3} if kind is PrioritizedReplay else {}
    return kind(
        streams, streams * C, frame_shape=(H, W), stack=3, n_step=2, gamma=0.9, num_actions=A, masked=True, device=device, **extra
    )


def fill(replay, seed=0):
    """Random episodes (terminations, truncations), masks and, prioritized, the actors' priorities, in adds of LENGTHS."""
    rng = np.random.default_rng(seed)
    ended = dict.fromkeys(LENGTHS, True)  # whether each stream's last step ended its episode
    for k in range(max(map(len, LENGTHS.values()))):
        for stream, lengths in LENGTHS.items():
            if k >= len(lengths):
                continue
            T = lengths[k]
            terminated = rng.random(T) < 0.15
            ends = terminated | (rng.random(T) < 0.05)  # a truncation ends an episode without terminating it
            first = np.concatenate([[ended[stream]], ends[:-1]])
            ended[stream] = bool(ends[-1])
            replay.add(
                stream,
                rng.integers(0, 256, (1, T, H, W), dtype=np.uint8),
                rng.integers(0, A, (1, T), dtype=np.uint8),
                rng.normal(size=(1, T)).astype(np.float32),
                terminated[None],
                first[None],
                rng.random((1, T)) if isinstance(replay, PrioritizedReplay) else None,
                rng.random((1, T, A)) < 0.7,
            )


def assert_same(a, b):
    """The same content: every saved array, the scalars and the host mirrors of the flags."""
    assert a.saved_arrays().keys() == b.saved_arrays().keys()
    for name, x in a.saved_arrays().items():
        y = b.saved_arrays()[name]
        if isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y, err_msg=name)
        else:
            assert x.dtype == y.dtype and torch.equal(x.cpu(), y.cpu()), name
    assert a.saved_scalars() == b.saved_scalars()
    np.testing.assert_array_equal(a._terminated_host, b._terminated_host)
    np.testing.assert_array_equal(a._first_host, b._first_host)


def assert_samples_equal(a, b, seed=5):
    x = a.sample(16, generator=torch.Generator().manual_seed(seed), beta=0.7)
    y = b.sample(16, generator=torch.Generator().manual_seed(seed), beta=0.7)
    assert x.keys() == y.keys()
    for key in x:
        assert torch.equal(x[key].cpu(), y[key].cpu()), key


def folder_of(tmp_path) -> str:
    return os.path.join(str(tmp_path), REPLAY_DIR)


def refused(tmp_path, why: str, path: str = "") -> str:
    return f"[MAIN] the saved replay {path or folder_of(tmp_path)} is not used ({why}); replay starts empty"


@pytest.mark.parametrize("chunk", [saved.CHUNK_BYTES, 100])  # 100 bytes: many chunks, a partial last one
@pytest.mark.parametrize("kind", [FrameReplay, PrioritizedReplay])
def test_a_saved_replay_comes_back_exactly_and_samples_as_the_original(tmp_path, monkeypatch, kind, chunk):
    monkeypatch.setattr(saved, "CHUNK_BYTES", chunk)
    replay = make(kind)
    fill(replay)
    assert replay.heads.tolist() == [60, 61, 9] and replay._expired().tolist() == [False, False, True]
    if kind is PrioritizedReplay:  # a draw (it takes the expired stream out of the tree) and new priorities
        batch = replay.sample(8, generator=torch.Generator().manual_seed(1), beta=0.5)
        replay.update_priorities(batch["host_stream"], batch["host_slot"], np.linspace(-4.0, 6.0, 8))
        assert replay.max_priority == pytest.approx(6.0 + 1e-3)
    assert save_replay(str(tmp_path), replay, STAMP) == folder_of(tmp_path)
    assert sorted(os.listdir(tmp_path)) == [REPLAY_DIR]  # no temporary folder left
    with open(os.path.join(folder_of(tmp_path), STAMP_NAME)) as fh:
        assert json.load(fh)["stamp"] == STAMP
    frames = np.load(os.path.join(folder_of(tmp_path), "frames.npy"), mmap_mode="r")  # plain .npy files
    np.testing.assert_array_equal(frames, replay._frames.numpy())

    back, said = make(kind), []
    line = restore_replay(str(tmp_path), back, dict(STAMP), said.append)
    assert said == [line] == [f"[MAIN] replay restored from {folder_of(tmp_path)}: {len(replay):,} transitions"]
    assert_same(replay, back)
    if kind is PrioritizedReplay:
        assert back.max_priority == replay.max_priority
        np.testing.assert_array_equal(back._tree.tree, replay._tree.tree)
        np.testing.assert_array_equal(back._zeroed, replay._zeroed)
    assert_samples_equal(replay, back)
    if kind is PrioritizedReplay:  # the draws left both trees alike
        np.testing.assert_array_equal(back._tree.tree, replay._tree.tree)
    fill(replay, seed=1)  # and both go on alike
    fill(back, seed=1)
    assert_same(replay, back)
    assert_samples_equal(replay, back, seed=6)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_replay_on_a_gpu_goes_out_and_back_in_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(saved, "CHUNK_BYTES", 100)
    replay = make(PrioritizedReplay, device="cuda")
    fill(replay)
    save_replay(str(tmp_path), replay, STAMP)
    for device in ("cuda", "cpu"):  # the device is not part of the layout
        back = make(PrioritizedReplay, device=device)
        assert "restored" in restore_replay(str(tmp_path), back, STAMP, lambda line: None)
        assert_same(replay, back)
        if device == "cuda":
            assert_samples_equal(replay, back)


@pytest.mark.parametrize(
    "stamp,why",
    [
        (
            {**STAMP, "updates": 60, "inserted": 1200},
            "stale: saved at 1,000 env steps (50 updates), the checkpoint is at 1,200 env steps (60 updates)",
        ),
        ({**STAMP, "samples_trained": 900}, "stale: saved at samples_trained 800, the checkpoint is at samples_trained 900"),
        ({**STAMP, "run": 8}, "stale: saved by run 7, the checkpoint is run 8's"),
    ],
)
def test_a_replay_saved_with_another_checkpoint_is_refused_in_one_line_and_left_on_disk(tmp_path, stamp, why):
    replay = make(PrioritizedReplay)
    fill(replay)
    save_replay(str(tmp_path), replay, STAMP)
    back, said = make(PrioritizedReplay), []
    assert restore_replay(str(tmp_path), back, stamp, said.append) == refused(tmp_path, why)
    assert said == [refused(tmp_path, why)]
    assert len(back) == 0 and back.heads.tolist() == [0, 0, 0] and back.max_priority == 1.0
    assert os.path.isfile(os.path.join(folder_of(tmp_path), STAMP_NAME))  # the next save replaces it


def test_a_replay_of_another_layout_is_refused_naming_what_differs(tmp_path):
    replay = make(PrioritizedReplay)
    fill(replay)
    save_replay(str(tmp_path), replay, STAMP)
    said = []
    fewer = make(PrioritizedReplay, streams=2)
    restore_replay(str(tmp_path), fewer, STAMP, said.append)
    uniform = make(FrameReplay)
    restore_replay(str(tmp_path), uniform, STAMP, said.append)
    assert said == [
        refused(tmp_path, "layout differs: num_streams 3 saved, 2 here"),
        refused(tmp_path, "layout differs: kind 'PrioritizedReplay' saved, 'FrameReplay' here"),
    ]
    assert len(fewer) == 0 and len(uniform) == 0


def _write(path, data: bytes):
    with open(path, "wb") as fh:
        fh.write(data)


def _cut(path):
    with open(path, "rb") as fh:
        data = fh.read()
    _write(path, data[: len(data) // 2])


def _empty_folder(folder):
    for name in os.listdir(folder):
        os.remove(os.path.join(folder, name))


DAMAGES = {  # what a damaged save looks like, and the words of its refusal
    "empty folder": (_empty_folder, "empty"),
    "no stamp": (lambda f: os.remove(os.path.join(f, STAMP_NAME)), f"incomplete: no {STAMP_NAME}, which a save writes last"),
    "empty stamp": (lambda f: _write(os.path.join(f, STAMP_NAME), b""), f"corrupt ({STAMP_NAME} is empty)"),
    "garbage stamp": (
        lambda f: _write(os.path.join(f, STAMP_NAME), b"\xff\xfe garbage"),
        f"corrupt ({STAMP_NAME}: UnicodeDecodeError: ",
    ),
    "foreign stamp": (lambda f: _write(os.path.join(f, STAMP_NAME), b"[1, 2]"), f"corrupt ({STAMP_NAME} is not a replay stamp"),
    "no frames": (lambda f: os.remove(os.path.join(f, "frames.npy")), "corrupt (no frames.npy)"),
    "empty frames": (lambda f: _write(os.path.join(f, "frames.npy"), b""), "corrupt (frames.npy is empty)"),
    "garbage frames": (
        lambda f: _write(os.path.join(f, "frames.npy"), b"garbage " * 64),
        "corrupt (frames.npy is not a .npy file: ValueError: ",
    ),
    "truncated frames": (lambda f: _cut(os.path.join(f, "frames.npy")), "corrupt (frames.npy holds "),
    "other shape": (
        lambda f: np.save(os.path.join(f, "rewards.npy"), np.zeros((S, C + 1), np.float32)),
        "corrupt (rewards.npy holds ",
    ),
    "bad heads": (
        lambda f: np.save(os.path.join(f, "head.npy"), np.full(S, 10**6, np.int64)),
        "corrupt (heads summing to 3,000,000",
    ),
    "bad priorities": (
        lambda f: np.save(os.path.join(f, "priorities.npy"), np.full(S * C, np.nan)),
        "corrupt (priorities not all finite and >= 0)",
    ),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_save_is_refused_in_one_line_and_the_run_goes_on_with_an_empty_replay(tmp_path, damage):
    replay = make(PrioritizedReplay)
    fill(replay)
    save_replay(str(tmp_path), replay, STAMP)
    spoil, why = DAMAGES[damage]
    spoil(folder_of(tmp_path))
    back, said = make(PrioritizedReplay), []
    line = restore_replay(str(tmp_path), back, STAMP, said.append)
    assert said == [line] and line.startswith(refused(tmp_path, why).split("); replay starts")[0]), line
    assert line.endswith("; replay starts empty")
    assert len(back) == 0 and back.heads.tolist() == [0, 0, 0]
    fill(back)  # the run goes on: the replay takes new data as a fresh one does
    assert len(back) == len(replay)


def test_a_ring_that_fails_to_read_midway_leaves_the_replay_empty(tmp_path, monkeypatch):
    replay = make(PrioritizedReplay)
    fill(replay)
    save_replay(str(tmp_path), replay, STAMP)
    real = saved._read_into

    def failing(path, offset, array):
        if isinstance(array, np.ndarray):  # heads and priorities: read whole before the rings
            return real(path, offset, array)
        array.reshape(-1)[:5] = 1  # part of a ring went in
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(saved, "_read_into", failing)
    back = make(PrioritizedReplay)
    line = restore_replay(str(tmp_path), back, STAMP, lambda line: None)
    assert line == refused(tmp_path, "corrupt (OSError: [Errno 5] Input/output error)")
    assert len(back) == 0 and back.heads.tolist() == [0, 0, 0] and back.saved_scalars()["written"] == 0


@pytest.mark.parametrize("data", [b"", b"garbage" * 10])
def test_an_earlier_releases_replay_pt_is_refused_and_removed(tmp_path, data):
    _write(tmp_path / LEGACY_NAME, data)
    back, said = make(), []
    why = "an earlier release's, without its checkpoint's stamp; removed"
    assert restore_replay(str(tmp_path), back, STAMP, said.append) == refused(tmp_path, why, str(tmp_path / LEGACY_NAME))
    assert len(said) == 1 and len(back) == 0 and not (tmp_path / LEGACY_NAME).exists()


def test_what_unfinished_saves_left_is_removed_and_said_and_no_replay_says_nothing(tmp_path):
    (tmp_path / f"{REPLAY_DIR}.tmp-999").mkdir()
    _write(tmp_path / f"{REPLAY_DIR}.tmp-999" / "frames.npy", b"partial")
    _write(tmp_path / f"{LEGACY_NAME}.tmp", b"partial")
    said = []
    assert restore_replay(str(tmp_path), make(), STAMP, said.append) == ""
    left = sorted(str(tmp_path / name) for name in (f"{REPLAY_DIR}.tmp-999", f"{LEGACY_NAME}.tmp"))
    assert said == [f"[MAIN] removed {path}, left by a replay save that did not finish" for path in left]
    assert os.listdir(tmp_path) == []


def _previous_and_a_changed_replay(tmp_path):
    """A replay saved as the run's (stamped STAMP) and what it held then; the replay has taken more data since."""
    replay = make(PrioritizedReplay)
    fill(replay)
    save_replay(str(tmp_path), replay, STAMP)
    kept = make(PrioritizedReplay)
    restore_replay(str(tmp_path), kept, STAMP, lambda line: None)
    fill(replay, seed=1)
    return replay, kept


def assert_previous_replay_whole(tmp_path, kept):
    assert sorted(os.listdir(tmp_path)) == [REPLAY_DIR]  # no temporary or set-aside folder
    back = make(PrioritizedReplay)
    assert "restored" in restore_replay(str(tmp_path), back, STAMP, lambda line: None)
    assert_same(kept, back)


def test_a_save_the_disk_refuses_midway_leaves_no_partial_folder_and_the_previous_replay(tmp_path, monkeypatch):
    replay, kept = _previous_and_a_changed_replay(tmp_path)
    real, written = saved._write_array, []

    def full_disk(path, array):  # the third file meets a full disk after a few bytes
        written.append(path)
        if len(written) == 3:
            _write(path, b"\x93NUMPY")
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, array)

    monkeypatch.setattr(saved, "_write_array", full_disk)
    said = []
    later = {**STAMP, "updates": 60}
    assert not RefusedWrites(said.append).attempt("the replay", save_replay, str(tmp_path), replay, later)
    assert said == [
        "[MAIN] the replay not written (OSError: [Errno 28] No space left on device; 1 refused so far); the run goes on"
    ]
    assert len(written) == 3 and not glob.glob(str(tmp_path / f"{REPLAY_DIR}.tmp-*"))
    monkeypatch.undo()
    assert_previous_replay_whole(tmp_path, kept)


def test_a_save_that_fails_at_its_swap_puts_the_previous_replay_back(tmp_path, monkeypatch):
    replay, kept = _previous_and_a_changed_replay(tmp_path)
    real, renames = os.replace, []

    def failing_second_rename(src, dst):  # the previous replay steps aside, then the new one cannot take its place
        renames.append((src, dst))
        if len(renames) == 2:
            raise OSError(errno.EIO, "Input/output error")
        real(src, dst)

    monkeypatch.setattr(os, "replace", failing_second_rename)
    with pytest.raises(OSError, match="Input/output error"):
        save_replay(str(tmp_path), replay, {**STAMP, "updates": 60})
    monkeypatch.undo()
    assert len(renames) == 3 and renames[2][1] == folder_of(tmp_path)  # the third: the previous one back
    assert_previous_replay_whole(tmp_path, kept)


def test_a_replay_whose_checkpoint_was_not_written_is_dropped(tmp_path):
    replay, kept = _previous_and_a_changed_replay(tmp_path)
    told: list[bool] = []

    def state() -> dict:
        return {"learner": {}, "counters": {}, "config": "{}"}

    writing = Checkpointer(str(tmp_path), state, lambda line: None)
    writing.start(1, told.append)  # its thread tells whether the checkpoint was written
    writing.wait()
    pending = write_replay(str(tmp_path), replay, {**STAMP, "updates": 60})
    assert glob.glob(str(tmp_path / f"{REPLAY_DIR}.tmp-*")) == [pending.tmp]

    def then(written: bool) -> None:  # what the learner's does (learner/loop.py)
        told.append(written)
        if written:
            pending.commit()
        else:
            pending.discard()

    failing = Checkpointer(str(tmp_path / "gone"), state, lambda line: None)  # no such folder: the save fails
    failing.start(2, then)
    failing.wait()
    assert told == [True, False] and failing.failed
    os.remove(tmp_path / "checkpoint.pt")
    assert_previous_replay_whole(tmp_path, kept)


def test_a_replay_is_kept_by_the_checkpoint_that_holds_its_stamp_only(tmp_path):
    replay = make()
    fill(replay)
    save_replay(str(tmp_path), replay, STAMP)
    assert discard_stale_replay(str(tmp_path), dict(STAMP)) == ""
    assert os.path.isdir(folder_of(tmp_path))
    assert discard_stale_replay(str(tmp_path), {**STAMP, "epoch": 4}) == folder_of(tmp_path)
    assert os.listdir(tmp_path) == [] and discard_stale_replay(str(tmp_path), STAMP) == ""


def test_the_stamp_is_the_checkpoints_counters_that_change_with_each_update_or_insert():
    counters = {"epoch": 2, "updates": 40, "weights_version": 9, "run": 5, "samples_trained": 640, "inserted": 512}
    assert replay_stamp(counters | {"elapsed_seconds": 3.5}) == {
        "run": 5,
        "epoch": 2,
        "updates": 40,
        "inserted": 512,
        "samples_trained": 640,
    }


@pytest.mark.parametrize("value", [-1, 1.5, True])
def test_replay_every_names_a_bad_value(value):
    with pytest.raises(ConfigError, match=f"learner\\.replay_every={value!r} must be an integer >= 0"):
        LearnerConfig(replay_every=value).validate()
    LearnerConfig(replay_every=0).validate()  # only at a stop before the budget


def test_every_kth_checkpoint_of_a_learner_carries_its_replay_and_the_last_removes_a_stale_one(tmp_path):
    from learner.data_plane import make_replay
    from learner.loop import Learner
    from shared.resolution import resolve_run
    from tests.support.runs import small_config

    cfg = small_config(actors=1, envs=1, steps=16, capacity=1024)
    cfg.collect_only, cfg.learner.compile, cfg.learner.micro_batch, cfg.learner.replay_every = False, False, 16, 2
    learner = Learner(resolve_run(cfg, device="cpu"), str(tmp_path))
    said: list[str] = []
    learner.echo = said.append
    replay, folder = learner.plane.replay, folder_of(tmp_path)
    try:
        for epoch in (1, 2):
            T = 64
            frames = torch.zeros((1, T, *replay.frame_shape), dtype=replay.obs_dtype)
            first = torch.zeros((1, T), dtype=torch.bool)
            first[0, 0] = epoch == 1
            masks = torch.ones((1, T, replay.num_actions), dtype=torch.bool).numpy() if replay.masked else None
            zeros = torch.zeros((1, T), dtype=torch.uint8)
            rewards = torch.ones((1, T))
            replay.add(0, frames, zeros, rewards, torch.zeros((1, T), dtype=torch.bool), first, masks=masks)
            c = learner.counters
            c.epoch, c.updates, c.inserted, c.samples_trained = epoch, 5 * epoch, T * epoch, 80 * epoch
            learner.checkpoints.start(epoch, learner._replay_with_checkpoint())  # as an epoch end starts one
            learner.checkpoints.wait()
            assert os.path.isdir(folder) == (epoch == 2), epoch  # the 2nd checkpoint only
        counters = load_checkpoint(str(tmp_path))["counters"]
        assert counters["epoch"] == 2
        with open(os.path.join(folder, STAMP_NAME)) as fh:
            assert json.load(fh)["stamp"] == replay_stamp(counters)
        back = make_replay(learner.cfg, learner.spec, torch.device("cpu"))
        line = restore_replay(str(tmp_path), back, replay_stamp(counters), said.append)
        assert line == f"[MAIN] replay restored from {folder}: 128 transitions"
        assert_same(replay, back)
        learner.counters.updates += 5  # trained on: the last checkpoint is not the replay's
    finally:
        learner.close(keep_replay=False)
    assert said[-1] == f"[MAIN] removed {folder}: saved with an earlier checkpoint, which a resume of the last does not use"
    assert not os.path.exists(folder) and load_checkpoint(str(tmp_path))["counters"]["updates"] == 15


def test_a_resume_that_falls_back_to_the_previous_checkpoint_refuses_the_newer_ones_replay(tmp_path):
    from learner.checkpoint import save_checkpoint

    counters = [{"run": 7, "epoch": e, "updates": 5 * e, "inserted": 100 * e, "samples_trained": 20 * e} for e in (1, 2)]
    for c in counters:
        save_checkpoint(str(tmp_path), {"learner": {}, "counters": c, "config": "{}"})
    replay = make()
    fill(replay)
    save_replay(str(tmp_path), replay, replay_stamp(counters[1]))  # saved with the newest checkpoint
    _write(tmp_path / "checkpoint.pt", b"garbage")
    state = load_checkpoint(str(tmp_path))  # checkpoint.prev.pt, what the resume continues
    assert state["counters"]["epoch"] == 1
    back = make()
    line = restore_replay(str(tmp_path), back, replay_stamp(state["counters"]), lambda line: None)
    why = "stale: saved at 200 env steps (10 updates), the checkpoint is at 100 env steps (5 updates)"
    assert line == refused(tmp_path, why) and len(back) == 0
