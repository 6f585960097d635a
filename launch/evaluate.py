"""Evaluate a run's checkpoint: N epsilon-greedy episodes, one pure-greedy episode, a table and a JSON file.

    python -m launch.evaluate runs/20250101-120000-1234
    python -m launch.evaluate runs/RUN --episodes 50 --epsilon 0.05 --env.mario.stage 1-2 --video best.mp4
    python -m launch.evaluate runs/RUN --checkpoint backup/checkpoint-100k.pt --json eval-100k.json
    python -m launch.evaluate --policy random --env.mario.stage 1-1 --episodes 20      # the random baseline
    python -m launch.evaluate --policy constant --action right+A --episodes 50  # hold right+A at epsilon 0.05
    python -m launch.evaluate --policy random --env.mario.actions right_only --env.mario.no-jump-release --episodes 50
    python -m launch.evaluate runs/RUN --drills 20    # and 20 trials from a saved state just before each hazard
    python -m launch.evaluate --pretrained agents/mario-1-1.safetensors --episodes 20  # an exported agent (launch.tools.export)

RUN_DIR (made by ``launch.local``) gives the env (``--env.*`` change it; without a run, ``EnvConfig``'s defaults) and
the network (``--net``); ``--pretrained FILE`` plays an agent file of launch.tools.export instead, with the env and
network its metadata names (``--env.*`` change the env), no training first. Beside the N episodes at ``--epsilon`` one
greedy episode plays at epsilon 0 (Mario is deterministic given the actions), on envs without a single-env form (Snake,
fuel breaks) a random policy plays the same seeds, then the protocol's secondary rows (shared/evaluation/protocol.py) on
streams of their own from ``--seed``, and with ``--drills N`` N trials per hazard from a saved state before it
(shared/evaluation/drills.py). The JSON (``--json``; default ``eval-STAGE-eps0.05.json`` or ``eval-STAGE-random.json``
in RUN_DIR, else here) holds them all with every episode. Bad input prints one line on stderr naming the value and exits
with 2.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import sys
import time
from typing import Annotated, Any, Literal

import torch
import tyro

from launch.cli import UsageError, import_plugin, parse, plain, plugin_module, refuse_renamed, with_env_options
from learner.checkpoint import BEST_NAME, CHECKPOINT_NAME
from shared.agent_file import AgentFileError, load_agent
from shared.config import ConfigError, EnvConfig, EvalConfig, RunConfig
from shared.config_migration import read_config
from shared.envs import EnvEntry, action_names, check_env, entry_for, env_label, env_spec
from shared.evaluation.drills import LEAD, format_drills, play_drills
from shared.evaluation.episodes import Episode, build_network, episode_record, play_episodes, ranked_episode, summarize
from shared.evaluation.hazards import clusters_for, format_hazards, hazard_table
from shared.evaluation.protocol import extra_rows, row_of, say_row
from shared.seeding import EVAL_DRILLS, stream_seed
from shared.writes import write_atomic

PROG = "python -m launch.evaluate"
RENAMED = {
    "--stage": "--env.mario.stage",
    "--buttons": "--env.mario.actions",
    "--jump-release": "--env.mario.jump-release (on) or --env.mario.no-jump-release (off)",
    "--max-episode-steps": "--env.max-episode-steps",
    "--env": "--env.name",
    "--env-module": "--env.module",
}
"""Env options refused in another spelling than launch.local's; the error names launch.local's."""
VIDEO_EPISODES = ("best", "worst", "greedy")


@dataclasses.dataclass
class EvaluateArgs:
    run_dir: Annotated[str | None, tyro.conf.Positional, tyro.conf.arg(metavar="RUN_DIR")] = None
    """Run folder (config.json, checkpoint.pt); optional with --policy random or constant."""
    episodes: int = 20
    """Episodes at --epsilon."""
    epsilon: float = 0.05
    """Exploration rate in [0, 1]."""
    seed: int = 0
    """Seed of the env and of the exploration."""
    policy: Literal["greedy", "random", "constant"] = "greedy"
    """greedy: epsilon-greedy on the network; random; constant: --action on every step, epsilon-greedy around it."""
    action: Annotated[str | None, tyro.conf.arg(metavar="NAME")] = None
    """The action --policy constant holds, by name (Mario: buttons joined by '+', e.g. right+A)."""
    net: Literal["auto", "best", "online"] = "auto"
    """Which network plays: best = RUN_DIR/best.pt (the weights the run chose); online = the last checkpoint's;
    auto = best when RUN_DIR holds best.pt and no --checkpoint is given, else online."""
    checkpoint: Annotated[str | None, tyro.conf.arg(metavar="PATH")] = None
    """A checkpoint file to load instead of RUN_DIR/checkpoint.pt."""
    pretrained: Annotated[str | None, tyro.conf.arg(metavar="FILE")] = None
    """An agent file (.safetensors, from python -m launch.tools.export) to play, with its env and network; no RUN_DIR."""
    video: Annotated[str | None, tyro.conf.arg(metavar="PATH")] = None
    """Record an episode (the best unless --video-episode says otherwise) to PATH.mp4 or PATH.gif (Mario)."""
    video_episode: Annotated[str, tyro.conf.arg(metavar="WHICH")] = "best"
    """Which episode --video records: best (highest score of the epsilon run), worst, greedy (the pure-greedy
    episode), or N, episode N of the epsilon run (0-based, as in the JSON; the same --seed plays the same ones)."""
    json: Annotated[str | None, tyro.conf.arg(metavar="PATH")] = None
    """Where to write the results."""
    low_epsilon_episodes: int | None = None
    """Episodes of the secondary row at eval.low_epsilon (default: the run's eval.low_epsilon_episodes, else 50; 0: none)."""
    noop_episodes: int | None = None
    """Episodes of the secondary row at epsilon 0 after 0-eval.noop_max no-op steps (default: the run's
    eval.noop_episodes, else 30; 0: none)."""
    drills: int = 0
    """Trials per drill point and variant: each hazard played from a saved state --drill-lead steps before it, plain and
    with one forced random press, at --epsilon (shared/evaluation/drills.py; envs with states, Mario; 0: no drills)."""
    drill_lead: int = LEAD
    """Agent steps from a drill point's state to its hazard."""
    env: EnvConfig = dataclasses.field(default_factory=EnvConfig)
    """The env played: the run's (without RUN_DIR: the defaults) with the --env.* options given changed."""


def _is_number(text: str) -> bool:
    return text.isascii() and text.isdigit()


def video_episode(episodes: list[Episode], greedy_ep: Episode | None, which: str) -> tuple[int | str, Episode]:
    """The episode ``--video-episode`` names and its number ('greedy' for the greedy one; best where there is none)."""
    if which == "greedy" and greedy_ep is not None:
        return "greedy", greedy_ep
    index = int(which) if _is_number(which) else ranked_episode(episodes, "worst" if which == "worst" else "best")
    return index, episodes[index]


def parse_args(argv: list[str], env: EnvConfig | None = None) -> EvaluateArgs:
    """The command line, its ``--env.*`` over ``env``'s values; the plug-ins it and ``env`` name are imported first."""
    refuse_renamed(argv, RENAMED)
    try:
        for module in (plugin_module(argv), env.module if env is not None else ""):
            import_plugin(module)
        kind = with_env_options(EvaluateArgs, env)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    return plain(parse(kind, argv, PROG, __doc__.split("\n\n")[0]), EvaluateArgs)


def check_args(args: EvaluateArgs) -> None:
    """UsageError naming the first of evaluate's own options that is out of range or does not go with the others."""
    if args.episodes < 1:
        raise UsageError(f"--episodes={args.episodes!r} must be >= 1")
    if not 0.0 <= args.epsilon <= 1.0:  # also rejects nan
        raise UsageError(f"--epsilon={args.epsilon!r} must be in [0, 1]")
    for flag, count in (("--low-epsilon-episodes", args.low_epsilon_episodes), ("--noop-episodes", args.noop_episodes)):
        if count is not None and not 0 <= count <= 1000:
            raise UsageError(f"{flag}={count!r} must be in [0, 1000] (0: no such row)")
    if not 0 <= args.drills <= 1000:
        raise UsageError(f"--drills={args.drills!r} must be in [0, 1000] (0: no drills)")
    if not 1 <= args.drill_lead <= 1000:
        raise UsageError(f"--drill-lead={args.drill_lead!r} must be in [1, 1000]")
    if args.video is not None and os.path.splitext(args.video)[1].lower() not in (".mp4", ".gif"):
        raise UsageError(f"--video={args.video!r} must end in .mp4 or .gif")
    which = args.video_episode
    if which not in VIDEO_EPISODES and not (_is_number(which) and int(which) < args.episodes):
        raise UsageError(
            f"--video-episode={which!r} must be one of {', '.join(VIDEO_EPISODES)} "
            f"or an episode number below --episodes={args.episodes}"
        )
    if args.video is None and which != "best":
        raise UsageError(f"--video-episode={which!r} names the episode --video records: add --video PATH")
    if (args.action is not None) != (args.policy == "constant"):
        raise UsageError(f"--action={args.action!r} goes with --policy constant (and it needs one), not --policy {args.policy}")
    if args.pretrained is not None:
        given = [f for f, v in (("RUN_DIR", args.run_dir), ("--checkpoint", args.checkpoint)) if v is not None]
        given += [f"--net {args.net}"] if args.net != "auto" else []
        given += [f"--policy {args.policy}"] if args.policy != "greedy" else []
        if given:
            raise UsageError(f"--pretrained={args.pretrained!r} plays the agent file's network: no {', '.join(given)} with it")


def load_run(args: EvaluateArgs) -> tuple[RunConfig | None, dict | None, str | None]:
    """The run's config (RUN_DIR's config.json, else the checkpoint's), and for --policy greedy the checkpoint that
    plays and its path (``args.net`` 'auto' made best or online); UsageError names what is missing or unreadable."""
    run_dir, cfg = args.run_dir, None
    if args.pretrained is not None:
        return load_pretrained(args.pretrained)
    if run_dir is not None:
        if not os.path.isdir(run_dir):
            raise UsageError(f"run folder {run_dir!r} does not exist")
        config_path = os.path.join(run_dir, "config.json")
        if os.path.isfile(config_path):
            try:
                with open(config_path, encoding="utf-8") as fh:
                    cfg = read_config(fh.read())
            except (ValueError, TypeError, OSError) as exc:
                raise UsageError(f"config {config_path!r} is not readable: {exc}") from None
    if args.policy != "greedy":
        if run_dir is not None and cfg is None:
            raise UsageError(f"run folder {run_dir!r} has no config.json")
        return cfg, None, args.checkpoint
    path = checkpoint_path(args)
    state = read_network_checkpoint(path)
    if cfg is None:
        try:
            cfg = read_config(state["config"])
        except (KeyError, ValueError, TypeError) as exc:
            where = f"run folder {run_dir!r} has no config.json and " if run_dir else ""
            raise UsageError(f"{where}checkpoint {path!r} carries no readable config ({exc})") from None
    return cfg, state, path


def read_network_checkpoint(path: str) -> dict:
    """A checkpoint file (checkpoint.pt, best.pt, kept weights) holding ``learner.online``; UsageError names the path."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # pickle, zip or torch errors: all mean "not a readable checkpoint"
        raise UsageError(f"checkpoint {path!r} is not readable: {type(exc).__name__}: {exc}") from None
    if not isinstance(state, dict) or not isinstance(state.get("learner"), dict) or "online" not in state["learner"]:
        raise UsageError(f"checkpoint {path!r} holds no learner.online network")
    return state


def load_pretrained(path: str) -> tuple[RunConfig, dict, str]:
    """An agent file (shared/agent_file.py) as :func:`load_run` returns a run: a config with its env and network
    options, and a checkpoint-shaped dict of its online network (fp32) and counters; UsageError names the path."""
    try:
        agent = load_agent(path)
    except AgentFileError as exc:
        raise UsageError(str(exc)) from None
    cfg = RunConfig()
    cfg.env, cfg.net = agent.env, agent.net
    counters = agent.meta.get("source", {}).get("counters", {})
    state = {
        "learner": {"online": agent.state_dict()},
        "counters": {"updates": counters.get("updates"), "inserted": counters.get("env_steps")},
    }
    return cfg, state, path


def checkpoint_path(args: EvaluateArgs) -> str:
    """The checkpoint a network plays: --checkpoint (a file, or a folder's checkpoint.pt), else RUN_DIR's best.pt
    or checkpoint.pt as --net says; --net auto is made best or online here."""
    run_dir, path = args.run_dir, args.checkpoint
    if args.net == "auto":  # a run hands over its validated snapshot; an explicit file is played as it is
        best_there = path is None and run_dir is not None and os.path.isfile(os.path.join(run_dir, BEST_NAME))
        args.net = "best" if best_there else "online"
    if path is None:
        if run_dir is None:
            raise UsageError("RUN_DIR (or --checkpoint) is required unless --policy random or constant")
        name = BEST_NAME if args.net == "best" else CHECKPOINT_NAME
        path = os.path.join(run_dir, name)
        if not os.path.isfile(path):
            why = " (it is written at the first evaluation during training, --eval.every-env-steps)" if args.net == "best" else ""
            raise UsageError(f"--net={args.net}: no {name} in run folder {run_dir!r}{why}")
    elif os.path.isdir(path):
        path = os.path.join(path, CHECKPOINT_NAME)
    if not os.path.isfile(path):
        raise UsageError(f"--checkpoint={args.checkpoint!r} does not exist")
    return path


def play_env(args: EvaluateArgs, argv: list[str]) -> tuple[EnvEntry, EnvConfig]:
    """``args.env`` checked; an ``--env.<name>.*`` option of another env than the one played is refused (it changes nothing)."""
    name = args.env.name
    for arg in argv:
        parts = arg.split("=", 1)[0].split(".")
        if len(parts) > 2 and parts[0] == "--env" and parts[1].replace("-", "_") != name.replace("-", "_"):
            raise UsageError(f"{'.'.join(parts)} is an option of env {parts[1]}; this evaluation plays env.name={name!r}")
    try:
        return check_env(args.env)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def resolve(argv: list[str]) -> tuple[EvaluateArgs, dict]:
    """Parse and check the command line and gather what the evaluation needs; raises UsageError naming a bad value."""
    args = parse_args(argv)
    check_args(args)
    cfg, state, ckpt_path = load_run(args)
    if cfg is not None:  # the run's env under the --env.* options given
        args = dataclasses.replace(parse_args(argv, cfg.env), net=args.net)
    entry, env = play_env(args, argv)
    action = None
    if args.action is not None:
        names = action_names(env)
        if args.action not in names or entry.make_single is None:
            raise UsageError(f"--action={args.action!r} must be one action of env {env.name}: {', '.join(names[:16])}")
        action = names.index(args.action)
    if args.drills and not (entry.states and entry.make_single is not None):
        raise UsageError(
            f"--drills={args.drills} needs an env that saves its state (Mario, fake), this one is env.name={env.name!r}"
        )
    if args.video is not None and not entry.video:
        raise UsageError(f"--video={args.video!r} needs an env that films (Mario), this one is env.name={env.name!r}")
    net = None
    if state is not None:  # the checkpoint's online network; UsageError when its shape is another env's
        assert cfg is not None  # load_run read it with the checkpoint
        try:
            net = build_network(env, state["learner"]["online"], cfg.net)
        except (RuntimeError, KeyError, TypeError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise UsageError(
                f"checkpoint {ckpt_path!r} does not fit the network of env {env.name} ({env_spec(env)}): {first}"
            ) from None
    counters = (state or {}).get("counters") or {}
    ev = cfg.eval if cfg is not None else EvalConfig()
    low_n = ev.low_epsilon_episodes if args.low_epsilon_episodes is None else args.low_epsilon_episodes
    noop_n = ev.noop_episodes if args.noop_episodes is None else args.noop_episodes
    job: dict[str, Any] = dict(env=env, net=net, action=action, run_dir=args.run_dir, checkpoint=ckpt_path, label=env_label(env))
    job["updates"] = counters.get("updates", (state or {}).get("learner", {}).get("updates"))
    job |= dict(env_steps=counters.get("inserted"), wall_seconds=counters.get("wall_seconds"))
    job["secondary"] = extra_rows(ev, args.seed, low=low_n, noop=noop_n)
    job["json_path"] = args.json or os.path.join(args.run_dir or ".", f"eval-{env_label(env)}-{_tag(args)}.json")
    return args, job


def _tag(args: EvaluateArgs) -> str:
    """The default JSON file name's policy part: eps0.05(-best), random, or constant-ACTION-eps0.05."""
    if args.policy == "greedy":
        return f"eps{args.epsilon:g}" + (f"-{_net(args)}" if _net(args) != "online" else "")
    return "random" if args.policy == "random" else f"constant-{args.action}-eps{args.epsilon:g}"


def _net(args: EvaluateArgs) -> str:
    """Which network plays, as the console and the JSON name it: best, online, or pretrained (an agent file)."""
    return "pretrained" if args.pretrained is not None else args.net


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def format_table(rows: list[tuple[str, dict]], names: list[str]) -> str:
    """The console table: one line per summary, then each one's action histogram (up to 32 actions)."""
    lines = [
        f"{'':<16}{'episodes':>9}{'score mean':>12}{'median':>10}{'max':>10}{'min':>10}{'success':>9}{'return':>9}{'length':>9}"
    ]
    for title, s in rows:
        lines.append(
            f"{title:<16}{s['episodes']:>9}{s['score_mean']:>12.2f}{s['score_median']:>10.1f}{s['score_max']:>10g}"
            f"{s['score_min']:>10g}{_pct(s['success_rate']):>9}{s['return_mean']:>9.2f}{s['length_mean']:>9.1f}"
        )
    for title, s in rows if len(names) <= 32 else ():
        lines.append(f"actions {title}: " + "  ".join(f"{n} {_pct(s['action_fractions'][n])}" for n in names))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    try:
        args, job = resolve(sys.argv[1:] if argv is None else list(argv))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # batch-1 forwards of a small convnet: more threads only add contention
    try:
        return _evaluate(args, job)
    finally:
        torch.set_num_threads(threads)


def _evaluate(args: EvaluateArgs, job: dict) -> int:
    env, net, greedy = job["env"], job["net"], args.policy == "greedy"
    names, num_actions = action_names(env), env_spec(env).num_actions
    counts = "".join(f", {k.replace('_', ' ')} {job[k]:,}" for k in ("updates", "env_steps") if isinstance(job[k], int))
    print(f"[EVAL] {job['run_dir'] or '-'}: checkpoint {job['checkpoint'] or '(no network)'}{counts}")
    label = f" {job['label']}" if job["label"] != env.name else ""
    played = (
        f"policy {args.policy}" + (f" ({_net(args)} net), epsilon {args.epsilon:g}" if greedy else "") + f", seed {args.seed}"
    )
    print(f"[EVAL] env {env.name}{label}, {len(names)} actions, {played}, {args.episodes} episode(s)", flush=True)

    start = time.perf_counter()
    episodes = play_episodes(net, env, args.episodes, args.epsilon, args.seed, policy=args.policy, action=job["action"])
    greedy_ep = (episodes[0] if args.epsilon == 0 else play_episodes(net, env, 1, 0.0, args.seed)[0]) if greedy else None
    seconds = time.perf_counter() - start
    steps = sum(e.length for e in episodes) + (greedy_ep.length if greedy_ep is not None and args.epsilon != 0 else 0)
    summary = summarize(episodes, num_actions, names)
    title = f"eps {args.epsilon:g}" if greedy else "random" if args.policy == "random" else f"{args.action} eps {args.epsilon:g}"
    rows = [(title, summary)]
    greedy_summary = None if greedy_ep is None else summarize([greedy_ep], num_actions, names)
    if greedy_summary is not None:
        rows.append(("greedy (eps 0)", greedy_summary))
    random_summary = None
    if entry_for(env).make_single is None and greedy:  # Snake and fuel breaks: the random policy on the same seeds
        random_summary = summarize(play_episodes(None, env, args.episodes, 1.0, args.seed, policy="random"), num_actions, names)
        rows.append(("random", random_summary))
    print(format_table(rows, names))
    print(f"[EVAL] {steps:,} agent steps in {seconds:.1f} s ({steps / max(seconds, 1e-9):,.0f} steps/s)", flush=True)
    clusters = clusters_for(env)
    records = [episode_record(e) for e in episodes]
    hazards = hazard_table(records, clusters)
    print(f"[EVAL] hazards: {format_hazards(hazards)}")
    secondary = play_secondary(args, job, clusters)
    drills = play_drills_row(args, job) if args.drills else None
    video: dict | None = None
    status = 0
    if args.video:
        from shared.evaluation.video import record_video  # imageio: only when filming

        which, filmed = video_episode(episodes, greedy_ep, args.video_episode)
        try:
            info = record_video(env, filmed.actions, args.video, expected_score=filmed.score)
            video = {**dataclasses.asdict(info), "episode": which}
            print(
                f"[EVAL] video {info.path}: {info.bytes:,} bytes, {info.frames:,} frames, {info.seconds:.1f} s "
                f"({which if which == 'greedy' else f'episode {which}'}: score {filmed.score:g}, "
                f"return {filmed.ret:.1f}, {filmed.length} steps)"
            )
        except RuntimeError as exc:  # the replay diverged; the file is there but shows another episode
            print(f"error: {exc}", file=sys.stderr)
            video, status = {"path": args.video, "error": str(exc)}, 1

    result = {k: job[k] for k in ("run_dir", "checkpoint", "updates", "env_steps", "wall_seconds")}
    result |= {"stage": job["label"], "epsilon": 1.0 if args.policy == "random" else args.epsilon, "action": args.action}
    result |= {"policy": args.policy, "net": _net(args) if greedy else None, "seed": args.seed, "env": env.to_dict()}
    greedy_row = None if greedy_ep is None else {**(greedy_summary or {}), "episode": episode_record(greedy_ep)}
    result |= {"summary": summary, "greedy": greedy_row, "random": random_summary, "episodes": records, "hazards": hazards}
    result |= {"secondary": secondary, "drills": drills, "video": video, "eval_seconds": seconds}
    path = job["json_path"]
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    write_atomic(path, json.dumps(result, indent=2) + "\n", tmp=f"{path}.tmp-{os.getpid()}")
    print(f"[EVAL] wrote {path}")
    return status


def play_secondary(args: EvaluateArgs, job: dict, clusters: list[tuple[str, float, float]]) -> dict:
    """The final evaluation's secondary rows for this policy, each on its own stream from ``--seed``, printed; None at 0."""
    env, net = job["env"], job["net"]
    entry = entry_for(env)
    words = entry.score.lower(), entry.success.lower()
    out: dict[str, dict | None] = {"low_epsilon": None, "noop_greedy": None}
    for x in job["secondary"]:
        epsilon = 1.0 if args.policy == "random" else x.epsilon
        played = play_episodes(
            net, env, x.episodes, x.epsilon, x.seed, policy=args.policy, action=job["action"], noop_max=x.noop_max
        )
        row = row_of([episode_record(e) for e in played], clusters, dataclasses.replace(x, epsilon=epsilon))
        say_row(f"[EVAL] {args.policy} {x.title}", row, words, functools.partial(print, flush=True))
        out[x.key] = dataclasses.asdict(row)
    return out


def play_drills_row(args: EvaluateArgs, job: dict) -> dict:
    """The drills of this policy (``--drills`` trials per point and variant, on a stream of its own from ``--seed``),
    printed as ``[DRILL]`` lines; their JSON."""
    env = job["env"]
    seed = stream_seed(args.seed, EVAL_DRILLS)
    net = job["net"] if args.policy == "greedy" else None
    print(
        f"[DRILL] {args.drills} trials per hazard and variant, from {args.drill_lead} steps before it, "
        f"policy {args.policy} at epsilon {1.0 if args.policy == 'random' else args.epsilon:g}",
        flush=True,
    )
    drills = play_drills(
        env, args.drills, args.epsilon, seed, args.drill_lead, policy=args.policy, net=net, action=job["action"]
    )  # fmt: skip
    for line in format_drills(drills):
        print(f"[DRILL] {line}", flush=True)
    steps = sum(p.steps for p in drills.points)
    print(f"[DRILL] {steps:,} agent steps in {drills.seconds:.1f} s, the reference and its states included", flush=True)
    return dataclasses.asdict(drills)


if __name__ == "__main__":
    sys.exit(main())
