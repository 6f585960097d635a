"""Checkpoints by time as well as by epochs, written by a thread of their own from a copy taken at the epoch end."""

import torch

from learner.checkpoint import Checkpointer, load_checkpoint


def test_a_checkpoint_falls_due_by_epochs_or_by_time_and_holds_the_state_of_its_epoch_end(tmp_path):
    weights = torch.arange(6, dtype=torch.float32)
    counters = {"epoch": 0}

    def state() -> dict:
        return {"learner": {"online": {"w": weights}}, "counters": dict(counters), "config": "{}"}

    said: list[str] = []
    by_epochs = Checkpointer(str(tmp_path), state, said.append, every_epochs=2, every_seconds=0.0)
    assert [by_epochs.due(e) for e in (1, 2, 3, 4)] == [False, True, False, True]
    assert Checkpointer(str(tmp_path), state, said.append, every_seconds=1e9).due(1) is False
    by_time = Checkpointer(str(tmp_path), state, said.append, every_seconds=1e-9)
    assert by_time.due(1)
    counters["epoch"] = 7
    by_time.start(7)
    assert not by_time.due(8)  # one save at a time
    weights += 100.0  # training goes on while the thread writes: the checkpoint keeps the epoch end's values
    by_time.wait()
    saved = load_checkpoint(str(tmp_path))
    assert saved["counters"]["epoch"] == 7
    assert torch.equal(saved["learner"]["online"]["w"], torch.arange(6, dtype=torch.float32))
    assert said == [] and not by_time.failed


def test_a_background_save_the_disk_refuses_is_said_at_the_next_poll_and_due_again(tmp_path):
    said: list[str] = []
    cp = Checkpointer(str(tmp_path / "gone"), lambda: {"learner": {}, "counters": {}, "config": "{}"}, said.append, 5)
    cp.start(5)
    cp.wait()
    assert cp.failed and said and said[0].startswith("[MAIN] checkpoint at epoch 5 failed (FileNotFoundError")
    assert cp.due(6)  # a failed checkpoint is due again at once
    (tmp_path / "gone").mkdir()
    assert cp.save_or_say(6) and said[-1] == "[MAIN] checkpoint at epoch 6 written after 1 failed"
