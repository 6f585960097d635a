"""Failed starts counted per checkpoint (launch/failures.py): identical failures from one checkpoint add up to the
stop; another error, a newer checkpoint or a clean end count afresh."""

import json

from launch.failures import (
    EXIT_REPEATED,
    FAILURES_NAME,
    REPEATS_TO_STOP,
    checkpoint_stamp,
    clear_failures,
    error_line,
    record_failure,
    repeated_line,
)


def test_identical_failures_from_one_checkpoint_add_up_to_the_stop(tmp_path):
    run = str(tmp_path)
    stamp = checkpoint_stamp({"counters": {"epoch": 4, "updates": 20, "inserted": 1536}})
    assert stamp == [4, 20]
    error = error_line(RuntimeError("injected: this update always fails\nsecond line"))
    assert error == "RuntimeError: injected: this update always fails"
    for count in range(1, REPEATS_TO_STOP):
        assert record_failure(run, stamp, error) == count
        assert repeated_line(run, stamp) == ""
    assert record_failure(run, stamp, error) == REPEATS_TO_STOP
    line = repeated_line(run, stamp)
    assert line.startswith(f"error: {REPEATS_TO_STOP} starts of {run} from its checkpoint (epoch 4, 20 updates)"), line
    assert f"(exit {EXIT_REPEATED})" in line and str(tmp_path / FAILURES_NAME) in line
    assert repeated_line(run, [4, 21]) == ""  # a newer checkpoint is not held back
    assert json.loads((tmp_path / FAILURES_NAME).read_text()) == {"checkpoint": [4, 20], "error": error, "count": 3}


def test_another_error_or_checkpoint_counts_afresh_and_a_clean_end_forgets(tmp_path):
    run = str(tmp_path)
    assert record_failure(run, [1, 5], "RuntimeError: a") == 1
    assert record_failure(run, [1, 5], "RuntimeError: a") == 2
    assert record_failure(run, [1, 5], "ValueError: b") == 1  # another error
    assert record_failure(run, [2, 10], "ValueError: b") == 1  # the run trained past the last failure
    assert record_failure(run, [], "OSError: c") == 1  # a new run's start
    (tmp_path / FAILURES_NAME).write_text("{not json")  # a damaged record counts as none
    assert record_failure(run, [2, 10], "ValueError: b") == 1
    clear_failures(run)
    clear_failures(run)  # nothing to forget: no error
    assert not (tmp_path / FAILURES_NAME).exists()
