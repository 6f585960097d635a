"""Configuration: bad values are refused with a message naming the field and the value; JSON round-trips."""

import json
import subprocess
import sys

import pytest

from launch.cli import run_config_type
from shared.config import AUTO, ActorConfig, ConfigError, EnvConfig, LearnerConfig, ReplayConfig, RunConfig
from shared.config_migration import read_config
from shared.envs import BUILTIN, options
from shared.envs.mario import MarioOptions, mario_options
from shared.envs.snake import SnakeOptions
from shared.exploration import epsilons
from shared.resolution import learner_config, resolve_config


@pytest.mark.parametrize(
    "path,value,needle",
    [
        ("actors", 0, "actors=0"),
        ("total_env_steps", -2, "total_env_steps=-2"),
        ("total_env_steps", 1.5, "total_env_steps=1.5"),
        ("learner.steps", -1, "learner.steps=-1"),
        ("env.mario.stage", "9-9", "env.mario.stage='9-9'"),
        ("env.mario.no_progress_steps", -1, "env.mario.no_progress_steps=-1"),
        ("env.name", "pong", "env.name='pong'"),
        ("env.module", "no_such_module_here", "env.module='no_such_module_here'"),
        ("env.frame_skip", 0, "env.frame_skip=0"),
        ("env.snake.size", 3, "env.snake.size=3"),
        ("env.snake.obs", "pixels", "env.snake.obs='pixels'"),
        ("env.snake.hunger", -1, "env.snake.hunger=-1"),
        ("env.fuelbreak.size", 7, "env.fuelbreak.size=7"),
        ("env.fuelbreak.budget", 0, "env.fuelbreak.budget=0"),
        ("env.fuelbreak.budget", 5000, "env.fuelbreak.budget=5000"),
        ("env.fuelbreak.ignitions", 0, "env.fuelbreak.ignitions=0"),
        ("env.fake.actions", 0, "env.fake.actions=0"),
        ("actor.batch_steps", 0, "actor.batch_steps=0"),
        ("actor.epsilon", 1.5, "actor.epsilon=1.5"),
        ("actor.precision", "fp16", "actor.precision='fp16'"),
        ("learner.target_sync_env_steps", 0, "learner.target_sync_env_steps=0"),
        ("learner.broadcast_env_steps", 0, "learner.broadcast_env_steps=0"),
        ("learner.reset_env_steps", -1, "learner.reset_env_steps=-1"),
        ("learner.reset_shrink", 1.5, "learner.reset_shrink=1.5"),
        ("learner.reset_env_steps", 5000, "learner.reset_env_steps=5000"),  # not past learner.min_replay's 5,000
        ("eval.every_env_steps", -1, "eval.every_env_steps=-1"),
        ("replay.priority_beta_steps", -2, "replay.priority_beta_steps=-2"),
        ("learner.munchausen_alpha", -0.5, "learner.munchausen_alpha=-0.5"),
        ("learner.rule", "foo", "learner.rule='foo' must be auto, double or munchausen"),
        ("learner.rule", "double_dqn", "learner.rule='double_dqn'"),
        ("learner.munchausen_alpha", 0.0, "learner.munchausen_alpha=0.0 must be > 0 under learner.rule='munchausen'"),  # Mario's
        ("learner.munchausen_tau", 0.0, "learner.munchausen_tau=0.0"),
        ("replay.capacity", 100, "replay.capacity=100"),
        ("replay.gamma", 1.5, "replay.gamma=1.5"),
        ("transport.host", "0.0.0.0", "transport.host='0.0.0.0'"),
        ("transport.base_port", 80, "transport.base_port=80"),
    ],
)
def test_bad_value_is_named(path, value, needle):
    cfg = RunConfig()
    target = cfg
    *parents, leaf = path.split(".")
    if parents[:1] == ["env"] and len(parents) == 2:  # an env's own options are checked when that env is chosen
        cfg.env.name = parents[1]
        cfg.env.options = {parents[1]: {leaf: value}}  # as config.json holds them
    else:
        for name in parents:
            target = getattr(target, name)
        setattr(target, leaf, value)
    with pytest.raises(ConfigError, match=needle.replace("[", r"\[").replace(".", r"\.")):
        resolve_config(cfg)


def test_json_round_trip_and_unknown_keys():
    cfg = resolve_config(RunConfig(actors=3, env=EnvConfig(options={"mario": MarioOptions(stage="4-2")})))
    cfg.replay.n_step = 5
    back = read_config(cfg.to_json())
    assert resolve_config(back) == cfg and mario_options(back.env).stage == "4-2"
    with pytest.raises(ConfigError, match="bogus"):
        read_config('{"bogus": 1}')


def test_launcher_reports_bad_value_and_exits_2():
    proc = subprocess.run(
        [sys.executable, "-m", "launch.local", "--actors", "0", "--collect-only"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert "actors=0" in proc.stderr


def test_generated_pages_are_current_and_list_every_option():
    import dataclasses

    from launch.tools import gendocs

    def flags(cls, prefix=""):
        for f in dataclasses.fields(cls):
            if f.name == "options":  # each env's options: the fields beside it
                continue
            factory = f.default_factory if f.default_factory is not dataclasses.MISSING else None
            if factory is not None and dataclasses.is_dataclass(factory):
                yield from flags(factory, prefix + f.name + ".")
            else:
                yield "--" + prefix + f.name.replace("_", "-")

    with open(gendocs.PAGE, encoding="utf-8") as fh:
        page = fh.read()
    assert gendocs.render(page) == page, "docs/configuration.md is not current: run python -m launch.tools.gendocs"
    with open(gendocs.PROTOCOL_PAGE, encoding="utf-8") as fh:
        assert fh.read() == gendocs.protocol_page(), "docs/protocol.md is not current: run python -m launch.tools.gendocs"
    with open(gendocs.LAYOUT_PAGE, encoding="utf-8") as fh:
        architecture = fh.read()
    assert gendocs.render_layout(architecture) == architecture, (
        "docs/architecture.md's layout table is not current: run python -m launch.tools.gendocs"
    )
    layout = architecture.split(gendocs.LAYOUT_BEGIN, 1)[1].split(gendocs.LAYOUT_END, 1)[0]
    for path in ("actors/", "shared/wire/", "learner/replay/sum_tree.py", "launch/benchmark/original.py"):
        assert f"| `{path}` |" in layout, path  # packages and modules of every depth
    reference = page.split(gendocs.HEADING, 1)[1].split("\n## ", 1)[0]
    every = [  # the command line's type, with each built-in env's options under its name (a plug-in a test
        # registered in this process has flags too, and no place in the built-in reference)
        flag
        for flag in flags(run_config_type())
        if not (flag.startswith("--env.") and flag.count(".") > 1 and flag.split(".")[1] not in BUILTIN)
    ]
    missing = [name for name in every if f"`{name}`" not in reference]
    assert not missing, missing
    assert {"--env.mario.stage", "--env.snake.size", "--env.fuelbreak.budget", "--env.fake.actions"} <= set(every)
    assert all(gendocs.field_docs(EnvConfig).get(name) for name in ("name", "module", "stack"))


def test_auto_fields_take_the_envs_values_when_resolved_and_are_saved_resolved():
    raw = RunConfig()
    assert (raw.actor.envs_per_actor, raw.actor.eps_anneal_env_steps, raw.total_env_steps) == (AUTO,) * 3  # as given
    cfg = resolve_config(raw)
    assert (cfg.actor.envs_per_actor, cfg.actor.eps_anneal_env_steps, cfg.total_env_steps) == (1, 100_000, 300_000)  # Mario
    assert raw.actor.envs_per_actor == AUTO  # resolve returns a new config
    fuel = resolve_config(RunConfig(env=EnvConfig(name="fuelbreak")))
    assert (fuel.actor.envs_per_actor, fuel.actor.eps_anneal_env_steps, fuel.total_env_steps) == (32, 128_000, 0)
    saved = read_config(fuel.to_json())
    assert (saved.actor.envs_per_actor, saved.actor.eps_anneal_env_steps, saved.total_env_steps) == (32, 128_000, 0)
    assert resolve_config(RunConfig(total_env_steps=0)).total_env_steps == 0  # set: no limit, on Mario too
    explicit = RunConfig(env=EnvConfig(name="fuelbreak"), actor=ActorConfig(envs_per_actor=2, eps_anneal_env_steps=0))
    assert (resolve_config(explicit).actor.envs_per_actor, resolve_config(explicit).actor.eps_anneal_env_steps) == (2, 0)
    alone = ActorConfig()  # outside a resolved RunConfig nothing fills it in, and using it says so
    assert (alone.envs_per_actor, alone.eps_anneal_env_steps) == (-1, -1)
    with pytest.raises(ConfigError, match="actor.envs_per_actor=-1"):
        epsilons(alone, 4, 0, 0)
    seeded = resolve_config(RunConfig(seed=7))
    assert (seeded.actor.seed, seeded.learner.seed, seeded.eval.seed) == (7, 7, 7)  # the components' seeds at -1


@pytest.mark.parametrize(
    "env,scale,sync,rule",
    [
        ("mario", 1 / 15, 16_000, "munchausen"),
        ("catch", 1.0, 2_000, "double"),
        ("snake", 0.1, 2_000, "double"),
        ("fake", 1.0, 2_000, "double"),
        ("fuelbreak", 100.0, 32_000, "double"),
    ],
)
def test_reward_scale_target_sync_and_rule_auto_per_env(env, scale, sync, rule):
    cfg = learner_config(LearnerConfig(), env).resolved("cpu")
    assert cfg.reward_scale == pytest.approx(scale)
    assert cfg.target_sync_env_steps == sync
    assert (cfg.rule, cfg.munchausen_alpha) == (rule, 0.9)  # alpha: Munchausen's weight wherever that rule is chosen
    assert resolve_config(RunConfig(env=EnvConfig(name=env))).learner.rule == rule  # the run's resolution too
    assert learner_config(LearnerConfig(reward_scale=0.5), env).reward_scale == 0.5
    assert learner_config(LearnerConfig(target_sync_env_steps=7), env).target_sync_env_steps == 7
    other = "double" if rule == "munchausen" else "munchausen"
    assert learner_config(LearnerConfig(rule=other), env).rule == other  # set by hand: kept
    assert learner_config(LearnerConfig(munchausen_alpha=0.5), env).munchausen_alpha == 0.5
    with pytest.raises(ConfigError, match="learner.reward_scale=-1 is still auto"):
        LearnerConfig().resolved("cpu")  # the device's autos only: the env's come first


def test_learner_rule_parses_by_name_and_refuses_munchausen_without_its_bonus():
    from launch.cli import parse_run_config

    assert parse_run_config(["--learner.rule", "munchausen"]).learner.rule == "munchausen"
    assert parse_run_config([]).learner.rule == "auto"
    catch = RunConfig(env=EnvConfig(name="catch"))
    catch.learner.rule = "munchausen"
    assert (resolve_config(catch).learner.rule, resolve_config(catch).learner.munchausen_alpha) == ("munchausen", 0.9)
    catch.learner.munchausen_alpha = 0.0
    with pytest.raises(ConfigError, match=r"learner\.munchausen_alpha=0\.0 .*--learner\.rule double"):
        resolve_config(catch)
    catch.learner.rule = "double"
    assert resolve_config(catch).learner.munchausen_alpha == 0.0  # Double DQN reads no alpha: 0 is allowed
    mario = RunConfig()
    mario.learner.rule = "double"
    assert resolve_config(mario).learner.rule == "double"  # set by hand on Mario: the Double-DQN target


def test_runs_saved_before_learner_rule_take_the_rule_their_alpha_chose():
    """Before learner.rule, munchausen_alpha chose the rule: above 0 Munchausen, 0 Double DQN, -1 the env's."""
    saved = json.loads(resolve_config(RunConfig()).to_json())
    saved["learner"].pop("rule")
    for alpha, rule in ((0.9, "munchausen"), (0.5, "munchausen"), (0.0, "double"), (AUTO, "auto")):
        saved["learner"]["munchausen_alpha"] = alpha
        old = read_config(json.dumps(saved))
        assert (old.learner.rule, old.learner.munchausen_alpha) == (rule, alpha)
        resolved = resolve_config(old).learner  # Mario's run
        assert resolved.rule == ("munchausen" if rule == "auto" else rule)
    saved["learner"].pop("munchausen_alpha")  # saved before Munchausen: Double DQN
    assert read_config(json.dumps(saved)).learner.rule == "double"
    saved["learner"].update(rule="munchausen", munchausen_alpha=0.0)  # a rule saved is kept, even where alpha disagrees
    assert read_config(json.dumps(saved)).learner.rule == "munchausen"


def test_old_layouts_load_through_one_migration(tmp_path):
    """A config.json of the flat env layout (env.stage, env.snake_size, ...) loads nested, with the Mario
    behaviour those runs had where they did not save it; resume, evaluation and checkpoints all read it so."""
    import json

    from launch.resume import resumed_config

    flat = json.loads(resolve_config(RunConfig()).to_json())
    env = flat["env"]
    env.pop("mario")
    env.update(stage="1-3", actions="right_only", snake_size=6, snake_obs="grid", fuelbreak_budget=9)
    cfg = read_config(json.dumps(flat))
    mario, snake = mario_options(cfg.env), options(cfg.env, "snake", SnakeOptions)
    assert (mario.stage, mario.actions) == ("1-3", "right_only")
    assert (mario.jump_release, mario.no_progress_steps) == (False, 0)  # not saved: as they ran
    assert (snake.size, snake.obs, cfg.env.options["fuelbreak"]["budget"]) == (6, "grid", 9)
    env["jump_release"] = True  # saved: kept
    assert mario_options(read_config(json.dumps(flat)).env).jump_release is True
    flat["learner"].pop("rule")  # saved before learner.rule
    flat["learner"]["munchausen_alpha"] = AUTO  # saved as auto (before resolve filled it in): kept
    assert read_config(json.dumps(flat)).learner.munchausen_alpha == -1
    flat["learner"].pop("munchausen_alpha")
    old = read_config(json.dumps(flat)).learner
    assert (old.munchausen_alpha, old.rule) == (0.0, "double")  # not saved: the Double-DQN max
    (tmp_path / "config.json").write_text(json.dumps(flat))
    assert mario_options(resumed_config(RunConfig(resume=str(tmp_path))).env).stage == "1-3"
    today = resolve_config(RunConfig())
    assert resolve_config(read_config(today.to_json())) == today  # today's layout passes unchanged
    with pytest.raises(ConfigError, match="bogus"):
        resolve_config(read_config(json.dumps({"env": {"mario": {"bogus": 1}}})))


def test_auto_is_minus_one_and_old_zero_autos_migrate():
    import json

    cfg = RunConfig()
    assert (cfg.learner.micro_batch, cfg.learner.accum_steps, cfg.learner.reward_scale, cfg.learner.threads) == (-1,) * 4
    resolved = resolve_config(cfg).learner.resolved("cpu")
    assert (resolved.micro_batch, resolved.accum_steps, resolved.reward_scale) == (64, 1, pytest.approx(1 / 15))
    saved = json.loads(cfg.to_json())
    saved["learner"].update(micro_batch=0, accum_steps=0, reward_scale=0.0, threads=0)  # auto before -1 was
    old = read_config(json.dumps(saved))
    assert (old.learner.micro_batch, old.learner.accum_steps, old.learner.reward_scale, old.learner.threads) == (-1,) * 4
    for path, value in (("learner.micro_batch", 0), ("learner.threads", -2), ("learner.reward_scale", 0.0)):
        section, key = path.split(".")
        bad = RunConfig()
        setattr(getattr(bad, section), key, value)
        with pytest.raises(ConfigError, match=f"{path}={value!r}"):
            resolve_config(bad)


def test_runs_saved_before_the_held_ratio_keep_the_cap_only_limiter_and_no_budget():
    import json

    today = RunConfig()
    assert today.learner.exact_ratio and today.learner.samples_per_insert == 4.0  # held at 4: the published runs
    assert today.learner.holds_ratio
    saved = json.loads(today.to_json())
    for key in ("exact_ratio", "samples_per_insert"):
        saved["learner"].pop(key)
    saved.pop("total_env_steps")
    old = read_config(json.dumps(saved))
    assert old.learner.exact_ratio is False and not old.learner.holds_ratio  # as those runs trained
    assert old.learner.samples_per_insert == 8.0 and old.total_env_steps == 0  # a cap of 8, no budget
    saved["learner"]["exact_ratio"] = True
    assert read_config(json.dumps(saved)).learner.exact_ratio is True  # saved: kept
    unlimited = RunConfig()
    unlimited.learner.samples_per_insert = 0
    assert not unlimited.learner.holds_ratio  # no ratio to hold: actors never wait
    bad = RunConfig()
    bad.learner.ratio_slack = -1
    with pytest.raises(ConfigError, match=r"learner.ratio_slack=-1"):
        resolve_config(bad)


RETIRED_AT_THEIR_DEFAULTS = {
    "replay": {"ending_share": 0.0, "ending_steps": 8, "ending_reserve": 2000},
    "actor": {"death_penalty": 0.0, "success_bonus": 0.0, "explore_repeat": 0.0, "explore_repeat_max": 10},
    "net": {"norm": "batch", "quantiles": 1},
    "learner": {
        "ema_decay": 0.0,
        "batchnorm_frozen_after": 0,
        "lr_final": 1.0,
        "lr_decay_steps": 300_000,
        "batchnorm": "eval",
        "augment": False,
        "n_step_start": 0,
        "n_step_anneal_env_steps": 5000,
        "munchausen_window": False,
        "bootstrap_epsilon": 0.0,
        "target_polyak": False,
    },
}
"""Every option retired after its screen lost (docs/lab/experiments/mario.md, "Levers retired"), at the value that
meant off: what every config.json saved before then holds."""


def test_runs_saved_with_retired_options_load():
    """A config.json holding the retired options at their old defaults loads as today's defaults; an option that
    only shaped training is dropped whatever it held (its weights evaluate and resume as they are); a run whose
    network today's code cannot build (LayerNorm, a quantile head) is refused, naming the option and the commit to use."""
    import json

    today = resolve_config(RunConfig())
    saved = json.loads(today.to_json())
    for section, keys in RETIRED_AT_THEIR_DEFAULTS.items():
        saved[section].update(keys)
    assert resolve_config(read_config(json.dumps(saved))) == today
    saved["replay"]["ending_share"] = 0.125  # training only: dropped
    assert resolve_config(read_config(json.dumps(saved))) == today
    saved["net"]["norm"] = "layer"  # a network today's code does not build
    with pytest.raises(ConfigError, match=r"net\.norm='layer': this run used LayerNorm, removed .* commit [0-9a-f]{7}"):
        read_config(json.dumps(saved))
    saved["net"]["norm"] = "batch"
    saved["net"]["quantiles"] = 200  # nor a quantile head
    with pytest.raises(ConfigError, match=r"net\.quantiles=200: this run used a quantile head, removed .* commit [0-9a-f]{7}"):
        read_config(json.dumps(saved))


def test_periods_saved_in_updates_or_epochs_load_as_the_env_steps_they_spanned():
    saved = json.loads(RunConfig().to_json())
    for key in ("target_sync_env_steps", "broadcast_env_steps"):
        del saved["learner"][key]
    del saved["eval"]["every_env_steps"]
    saved["learner"].update(target_sync=1_000, broadcast_every=5, samples_per_insert=4.0, updates_per_epoch=20)
    saved["eval"]["every"] = 100
    cfg = read_config(json.dumps(saved))  # batch auto: 64, so an update was 16 env steps
    assert (cfg.learner.target_sync_env_steps, cfg.learner.broadcast_env_steps) == (16_000, 1_600)
    assert learner_config(LearnerConfig(), "fuelbreak").broadcast_env_steps == 12_288
    assert learner_config(LearnerConfig(), "mario").broadcast_env_steps == 1_600
    assert cfg.eval.every_env_steps == 32_000
    saved["learner"].update(target_sync=-1, samples_per_insert=0.0, broadcast_every=5)
    saved["eval"]["every"] = 0
    cfg = read_config(json.dumps(saved))  # no ratio: no share of env steps per update
    assert cfg.learner.target_sync_env_steps == AUTO and cfg.learner.broadcast_env_steps == AUTO
    assert cfg.eval.every_env_steps == 0


def test_runs_saved_with_the_anneal_in_each_envs_steps_load_with_the_run_figure_that_spans_it():
    """Before the anneal counted the run's env steps, actor.eps_anneal_steps counted each env's: a saved run loads with
    that figure times its envs (actors x envs_per_actor), so each env anneals as it did; an auto one takes the env's."""
    from shared.exploration import anneal_steps_per_env

    saved = json.loads(resolve_config(RunConfig(actors=8)).to_json())
    del saved["actor"]["eps_anneal_env_steps"]
    saved["actor"].update(eps_anneal_steps=25_000, envs_per_actor=2)
    old = read_config(json.dumps(saved))
    assert old.actor.eps_anneal_env_steps == 400_000  # 25,000 x 8 actors x 2 envs
    assert anneal_steps_per_env(resolve_config(old).actor, old.actors) == 25_000  # each env as it ran
    saved["actor"]["eps_anneal_steps"] = 0
    assert read_config(json.dumps(saved)).actor.eps_anneal_env_steps == 0  # at the floors from the start, still
    saved["actor"]["eps_anneal_steps"] = AUTO
    assert read_config(json.dumps(saved)).actor.eps_anneal_env_steps == AUTO  # the env's run figure
    saved["actor"].update(eps_anneal_steps=25_000, envs_per_actor=0)  # saved before -1 was auto and configs were resolved
    assert read_config(json.dumps(saved)).actor.eps_anneal_env_steps == AUTO
    assert resolve_config(read_config(json.dumps(saved))).actor.eps_anneal_env_steps == 100_000


def test_priority_beta_reaches_one_at_the_budget():
    replay = ReplayConfig()
    assert replay.beta_at(0, 300_000) == pytest.approx(0.4)
    assert replay.beta_at(150_000, 300_000) == pytest.approx(0.7)
    assert replay.beta_at(300_000, 300_000) == pytest.approx(1.0)
    assert replay.beta_at(250_000) == pytest.approx(0.7)  # no budget: over 500,000 env steps
    assert ReplayConfig(priority_beta_steps=100).beta_at(50, 300_000) == pytest.approx(0.7)  # set by hand: kept
