"""launch.evaluate takes the env's options as launch.local spells them (launch/cli.py), over a run's env."""

import pytest

from launch.evaluate import RENAMED, main, parse_args
from shared.config import EnvConfig
from shared.envs.mario import MarioOptions


def test_evaluate_parses_the_env_options_as_launch_local_does():
    args = parse_args(["runs/RUN", "--env.mario.stage", "1-2", "--env.max-episode-steps", "0"])
    assert args.run_dir == "runs/RUN" and args.env.name == "mario" and args.env.max_episode_steps == 0
    assert args.env.options["mario"] == MarioOptions(stage="1-2")  # the rest at Mario's defaults


def test_a_runs_env_is_kept_but_for_the_options_given():
    run = EnvConfig(
        max_episode_steps=4500, options={"mario": MarioOptions(stage="4-2", actions="right_only", jump_release=False)}
    )
    assert parse_args(["runs/RUN"], run).env.options["mario"] == run.options["mario"]
    changed = parse_args(["runs/RUN", "--env.mario.stage", "1-2", "--env.mario.jump-release"], run).env
    assert changed.options["mario"] == MarioOptions(stage="1-2", actions="right_only", jump_release=True)
    assert changed.max_episode_steps == 4500


def test_stage_names_its_new_form_and_exits_2(capsys):
    assert main(["runs/RUN", "--stage", "1-2"]) == 2  # what python -m launch.evaluate exits with
    err = capsys.readouterr().err
    assert err == "error: --stage is now --env.mario.stage\n"


@pytest.mark.parametrize("old", sorted(RENAMED))
def test_every_old_spelling_names_its_new_form(capsys, old):
    assert main(["--policy", "random", f"{old}=x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {old} is now --env.") and err.count("\n") == 1
