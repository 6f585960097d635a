"""The learner's console phrases that are computed rather than copied (learner/console.py)."""

from learner.console import format_duration, other_run_phrase


def test_durations_read_at_a_glance():
    assert [format_duration(s) for s in (0, 42.4, 60, 425, 3600, 10_920)] == ["0s", "42s", "1m00s", "7m05s", "1h00m", "3h02m"]


def test_the_other_run_phrase_appears_only_when_an_actor_is_on_another_runs_weights():
    assert other_run_phrase(0) == ""
    assert other_run_phrase(2) == "; 2 actor(s) still on another run's weights"
