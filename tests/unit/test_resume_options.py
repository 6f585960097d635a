"""A resume takes from the command line what may change (slots, ports, keys, duration, budgets) and names in one line
every other option given that the run holds otherwise."""

from launch.resume import resumed_config
from shared.config import RunConfig
from shared.resolution import resolve_config


def test_a_resume_changes_slots_ports_and_keys_and_names_what_it_keeps(tmp_path, capsys):
    saved = resolve_config(RunConfig(actors=2, seed=5))
    (tmp_path / "config.json").write_text(saved.to_json())
    cli = RunConfig(resume=str(tmp_path), actors=6, duration=30.0, total_env_steps=400_000)
    cli.transport.base_port, cli.transport.curve_authorized_dir = 7100, "/keys/allowed"
    cli.learner.lr, cli.replay.capacity = 0.5, 5000
    got = resumed_config(cli)
    assert (got.actors, got.duration, got.total_env_steps) == (6, 30.0, 400_000)
    assert (got.transport.base_port, got.transport.curve_authorized_dir) == (7100, "/keys/allowed")
    assert (got.learner.lr, got.replay.capacity, got.seed) == (saved.learner.lr, saved.replay.capacity, 5)
    (line,) = [line for line in capsys.readouterr().out.splitlines() if "--resume keeps" in line]
    assert line == (
        "[MAIN] --resume keeps the run's own settings, not those given: "
        f"--learner.lr 0.5 (the run's: {saved.learner.lr!r}), --replay.capacity 5000 (the run's: {saved.replay.capacity!r})"
    )


def test_a_resume_given_nothing_new_says_nothing(tmp_path, capsys):
    saved = resolve_config(RunConfig(actors=3))
    (tmp_path / "config.json").write_text(saved.to_json())
    assert resumed_config(RunConfig(resume=str(tmp_path))).actors == 3  # not given: the run's own
    assert "--resume keeps" not in capsys.readouterr().out
