"""A resume tells an option the command line gives from one it leaves at its default: a given one wins where a resume
may change it (slots, ports, keys, budgets), at its default too, and the change is said; a given one it may not change
that differs from the run's is named as kept, at its default too. Issue 84, item 5."""

from launch import learner
from launch.cli import given_options, parse_run_config
from launch.exits import StopSignals
from launch.resume import resumed_config
from shared.config import LearnerConfig, RunConfig, TransportConfig
from shared.resolution import resolve_config

DEFAULT = RunConfig()
SLOTS, PORT = 8, 6000  # the saved run's, both away from the defaults


def saved_run(tmp_path, **changes) -> str:
    """A run folder whose config.json holds a resolved run of 8 slots on port 6000 (and ``changes``)."""
    changes.setdefault("transport", TransportConfig(base_port=PORT))
    cfg = resolve_config(RunConfig(actors=SLOTS, seed=5, **changes))
    (tmp_path / "config.json").write_text(cfg.to_json())
    return str(tmp_path)


def resume(run_dir: str, *args: str) -> RunConfig:
    """What ``--resume run_dir args`` runs, through the real parser and the options it says were given."""
    argv = ["--resume", run_dir, *args]
    cli = parse_run_config(argv)
    return resumed_config(cli, given_options(argv, cli))


def test_slots_and_port_given_at_their_defaults_win_and_are_said(tmp_path, capsys):
    assert (DEFAULT.actors, DEFAULT.transport.base_port) != (SLOTS, PORT)  # else this test proves nothing
    got = resume(saved_run(tmp_path), "--actors", str(DEFAULT.actors), "--transport.base-port", str(DEFAULT.transport.base_port))
    assert (got.actors, got.transport.base_port) == (DEFAULT.actors, DEFAULT.transport.base_port)
    out = capsys.readouterr().out
    said = (
        f"[MAIN] --resume takes from the command line: --actors {DEFAULT.actors} (the run's: {SLOTS}), "
        f"--transport.base-port {DEFAULT.transport.base_port} (the run's: {PORT})"
    )
    assert said in out.splitlines(), out
    assert "--resume keeps" not in out, out


def test_the_equals_form_counts_as_given(tmp_path, capsys):
    got = resume(saved_run(tmp_path), f"--actors={DEFAULT.actors}", f"--transport.base-port={DEFAULT.transport.base_port}")
    assert (got.actors, got.transport.base_port) == (DEFAULT.actors, DEFAULT.transport.base_port)
    assert f"--actors {DEFAULT.actors} (the run's: {SLOTS})" in capsys.readouterr().out


def test_an_option_not_given_keeps_the_runs_value(tmp_path, capsys):
    got = resume(saved_run(tmp_path), "--actors", "2")
    assert (got.actors, got.transport.base_port) == (2, PORT)
    out = capsys.readouterr().out
    assert "[MAIN] --resume takes from the command line: --actors 2 (the run's: 8)" in out.splitlines(), out
    assert "base-port" not in out, out
    assert resume(saved_run(tmp_path)).actors == SLOTS  # nothing given: the run's own, and nothing said
    assert "--resume" not in capsys.readouterr().out


def test_a_given_option_a_resume_cannot_change_is_named_as_kept_even_at_its_default(tmp_path, capsys):
    run_lr = 1e-4
    assert run_lr != DEFAULT.learner.lr  # the run's own, away from the default
    got = resume(saved_run(tmp_path, learner=LearnerConfig(lr=run_lr)), "--learner.lr", str(DEFAULT.learner.lr))
    assert got.learner.lr == run_lr
    out = capsys.readouterr().out
    said = f"--learner.lr {DEFAULT.learner.lr!r} (the run's: {run_lr!r})"
    assert f"[MAIN] --resume keeps the run's own settings, not those given: {said}" in out.splitlines(), out
    assert "--resume takes" not in out, out


def test_where_the_run_is_found_is_neither_taken_nor_named(tmp_path, capsys):
    got = resume(saved_run(tmp_path), "--run-dir", str(tmp_path / "elsewhere"))  # FINDS_THE_RUN, with --resume latest
    assert got.run_dir == DEFAULT.run_dir
    assert "--resume" not in capsys.readouterr().out


def test_a_budget_given_wins_at_its_default_too(tmp_path):
    run = saved_run(tmp_path, total_env_steps=50_000, learner=LearnerConfig(steps=500))
    got = resume(run)
    assert (got.total_env_steps, got.learner.steps) == (50_000, 500)  # not given: the run's budgets
    got = resume(run, "--total-env-steps", "20000", "--learner.steps", str(DEFAULT.learner.steps))
    assert (got.total_env_steps, got.learner.steps) == (20_000, DEFAULT.learner.steps)  # learner.steps 0: no limit


def test_given_options_reads_every_form_of_a_flag():
    argv = ["--resume", "latest", "--run-dir", "runs", "--actors=4", "--transport.base_port", "5600", "--no-progress"]
    argv += ["--learner.no-exact-ratio", "--label", "actors", "--env.mario.stage", "1-2"]
    given = given_options(argv, parse_run_config(argv))
    assert given == {
        "resume",
        "run_dir",
        "actors",
        "transport.base_port",
        "progress",
        "learner.exact_ratio",
        "label",
        "env.mario.stage",
    }  # "actors" after --label is its value, not a flag


class NoSignals(StopSignals):
    """Stop signals that leave the test process's handlers alone."""

    def install(self) -> StopSignals:
        return self


def test_the_learner_counts_warppipe_args_as_given(monkeypatch):
    """Compose puts WARPPIPE_SLOTS and WARPPIPE_PORT into the learner's command line (docker/compose.yml) and the
    learner puts WARPPIPE_ARGS before it: options from either count as given."""
    seen = {}
    monkeypatch.setattr(learner, "StopSignals", NoSignals)
    monkeypatch.setattr(learner, "run", lambda cfg, signals, given: seen.update(given=given) or 0)
    monkeypatch.setenv("WARPPIPE_ARGS", f"--transport.base-port {DEFAULT.transport.base_port}")
    monkeypatch.delenv("WARPPIPE_KEY_WAIT", raising=False)
    assert learner.main(["--resume", "latest", "--actors", str(DEFAULT.actors)]) == 0
    assert seen["given"] == {"resume", "actors", "transport.base_port"}
