"""Configuration: plain dataclasses, one docstring per field, saved as JSON and read back in today's layout.

The docstring under each field is what ``--help`` prints and docs/configuration.md lists; every bound on a queue,
buffer or table lives here. A run's :class:`RunConfig` is saved as JSON (``to_json``), read back by shared/config_migration.py.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Literal

from shared.errors import ConfigError
from shared.errors import check as _check
from shared.errors import check_range as _check_range
from shared.errors import is_int as _is_int

AUTO = -1
"""A numeric option at -1 takes a value that depends on the env, device or run (its docstring says which); strings say 'auto'."""
AUTOS = (AUTO, "auto")
"""Either auto: ``value in AUTOS`` (ENV_AUTO_FIELDS holds numeric options and learner.rule)."""

DEFAULT_BETA_STEPS = 500_000  # replay.priority_beta_steps' auto for a run without an env-step budget


@dataclass
class EnvConfig:
    """The game and its preprocessing (the same in actors, benchmark and tests); each env's own options nest under its name."""

    name: str = "mario"
    """Env (shared/envs/): 'mario' (nes-py Super Mario Bros), 'catch' (tiny pixel game), 'fake' (synthetic frames for
    plumbing tests), 'snake' (vectorized Snake), 'fuelbreak' (wildfire fuel breaks, masked), 'gym' (a Gymnasium env,
    env.gym.id) or one env.module registers."""
    module: str = ""
    """Module every process imports before looking env.name up, where an env outside warppipe registers (empty: none)."""
    frame_skip: int = 4
    """Mario and image Gymnasium envs (RGB envs in shared/envs/frames.py's Preprocess): emulator frames per agent step,
    the observation the max of the last two; catch, fake and envs of vector observations ignore it."""
    frame_size: int = 84
    """Frame envs: side of the square grayscale observation, in pixels."""
    stack: int = 4
    """Frame envs: frames per stacked observation given to the network."""
    max_episode_steps: int = AUTO
    """Agent steps after which an episode is truncated, which bootstraps (0: never; -1: the env's, 4,500 for Mario).
    Snake: its max_steps; fuel breaks end at their budget and ignore it."""
    options: dict[str, Any] = field(default_factory=dict)
    """Each env's own options, by env name (``--env.snake.size 6``; ``env.snake`` in config.json); unnamed: defaults."""

    def to_dict(self) -> dict[str, Any]:
        """The env as config.json holds it: each env's options under its name (``{"name": "mario", "mario": {...}}``)."""
        data = dataclasses.asdict(self)
        data.update(data.pop("options"))
        return data

    def validate(self) -> None:
        """The options every env shares; an env's own are checked by its entry (shared/resolution.py)."""
        _check(isinstance(self.name, str) and bool(self.name), "env.name", self.name, "must name an env")
        _check(_is_int(self.frame_skip) and self.frame_skip >= 1, "env.frame_skip", self.frame_skip, "must be >= 1")
        _check_range(self, "env.frame_size", 36, 256, "must be in [36, 256] (the conv stack)")
        _check(_is_int(self.stack) and 1 <= self.stack <= 16, "env.stack", self.stack, "must be in [1, 16]")
        _check_range(self, "env.max_episode_steps", 0, math.inf, "must be >= 0")


@dataclass
class ActorConfig:
    """A collector process: its envs, exploration and how it batches and sends."""

    envs_per_actor: int = AUTO
    """Envs one actor process steps as one vector env, one forward pass for all; -1: the env's (fuelbreak 32, else 1)."""
    batch_steps: int = 64
    """T: steps per env gathered into one message (each new frame is sent once)."""
    precision: Literal["fp32", "bf16"] = "fp32"
    """The arithmetic of the actors' copy of the network: bf16 is faster over many envs on a CPU with native bf16 and
    rounds Q-values slightly. Evaluation and the learner are unaffected."""
    epsilon: float = -1.0
    """Fixed exploration rate for every env; negative selects the schedule: each env anneals from 1.0 to its floor
    max(eps_min, eps_base**(1 + eps_alpha*i/(N-1))) (shared/exploration.py)."""
    eps_base: float = 0.4
    """Ape-X epsilon base (the floor of env 0)."""
    eps_alpha: float = 7.0
    """Ape-X epsilon exponent spread over the N envs of the run."""
    eps_min: float = 0.05
    """Lowest floor of any env, so that with few envs Ape-X's spread leaves none nearly greedy."""
    eps_anneal_env_steps: int = AUTO
    """Env steps of the run (transitions, all envs together) over which each env's epsilon falls linearly from 1.0 to
    its floor, split evenly over the actors x envs_per_actor envs, so their number leaves the share of a budget spent
    exploring unchanged (0: start at the floor; -1: the env's, 100,000: 25,000 steps of each env with 4 actors of one
    env; fuel breaks 128,000: 1,000 steps of each with 4 actors of 32)."""
    start_share: float = 0.0
    """Share of training episodes that start from a saved state of the actor's own play (a few steps before where recent
    episodes died, or at their frontier) instead of the true start; envs that save states only (Mario). Evaluation
    always starts at the true start (actors/starts.py)."""
    start_lead: int = 12
    """Agent steps before a recent episode's end (or its furthest point) where a saved-state start begins."""
    frontier_share: float = 0.25
    """Of the saved-state starts, the share at the frontier (the furthest recent states), each followed by random steps."""
    frontier_burst: int = 32
    """Random steps (epsilon 1) after a frontier start: exploration past the furthest point reached."""
    max_staged_batches: int = 16
    """Batches an actor holds when the learner does not take them; beyond it the oldest is dropped and counted."""
    send_hwm: int = 4
    """ZeroMQ send high-water mark (messages queued in the socket before the actor stages locally)."""
    seed: int = -1
    """Seed of the actors' envs and exploration (actor slot, env index and incarnation are mixed in); -1: the run's --seed."""
    nice: int = 10
    """Niceness added to actor processes, so the learner wins the CPU when it trails its replay ratio (0: even share)."""
    weights_timeout: float = 60.0
    """Seconds a starting actor waits for the learner's current weights before its first action (0: do not ask)."""
    slot_wait: float = 0.0
    """Actor without --actor-id: seconds it asks for a free slot while all are held before exiting with code 3 (0: forever)."""

    def validate(self) -> None:
        _check(0 <= self.nice <= 19, "actor.nice", self.nice, "must be in [0, 19]")
        _check(self.weights_timeout >= 0, "actor.weights_timeout", self.weights_timeout, "must be >= 0")
        _check(self.slot_wait >= 0, "actor.slot_wait", self.slot_wait, "must be >= 0 (0: wait forever)")
        later = "(-1, auto, is resolved when the RunConfig is built)"
        _check(1 <= self.envs_per_actor <= 4096, "actor.envs_per_actor", self.envs_per_actor, f"must be in [1, 4096] {later}")
        _check(self.precision in ("fp32", "bf16"), "actor.precision", self.precision, "must be fp32 or bf16")
        _check(1 <= self.batch_steps <= 4096, "actor.batch_steps", self.batch_steps, "must be in [1, 4096]")
        _check(self.epsilon <= 1.0, "actor.epsilon", self.epsilon, "must be <= 1 (negative: Ape-X schedule)")
        _check(0.0 < self.eps_base < 1.0, "actor.eps_base", self.eps_base, "must be in (0, 1)")
        _check(self.eps_alpha >= 0, "actor.eps_alpha", self.eps_alpha, "must be >= 0")
        _check(0.0 <= self.eps_min <= 1.0, "actor.eps_min", self.eps_min, "must be in [0, 1]")
        anneal = self.eps_anneal_env_steps
        _check(_is_int(anneal) and anneal >= 0, "actor.eps_anneal_env_steps", anneal, f"must be an integer >= 0 {later}")
        _check(0.0 <= self.start_share <= 1.0, "actor.start_share", self.start_share, "must be in [0, 1] (0: true starts only)")
        _check(1 <= self.start_lead <= 1000, "actor.start_lead", self.start_lead, "must be in [1, 1000]")
        _check(0.0 <= self.frontier_share <= 1.0, "actor.frontier_share", self.frontier_share, "must be in [0, 1]")
        _check(0 <= self.frontier_burst <= 10_000, "actor.frontier_burst", self.frontier_burst, "must be in [0, 10000]")
        _check(self.max_staged_batches >= 1, "actor.max_staged_batches", self.max_staged_batches, "must be >= 1")
        _check(self.send_hwm >= 1, "actor.send_hwm", self.send_hwm, "must be >= 1")


@dataclass
class ReplayConfig:
    """The learner's replay: a uint8 frame ring, one stream per actor env."""

    capacity: int = 100_000
    """Transitions held in total (split evenly over actors x envs_per_actor streams); about 7 KB each at 84x84."""
    n_step: int = 3
    """n of the n-step return computed at sample time."""
    gamma: float = AUTO
    """Discount factor; -1: the env's (0.9 for Mario, whose reward is dense: the x-velocity of every frame)."""

    prioritized: bool = True
    """Proportional prioritized replay (Ape-X), the loss weighted by importance sampling; off: uniform draws."""
    initial_priority: Literal["actor", "max"] = "actor"
    """A new slot's priority: 'actor' (the actor's n-step TD error, sent with its batch, as Ape-X) or 'max' (the largest yet)."""
    priority_alpha: float = 0.6
    """Exponent alpha of P(k) ~ p_k**alpha (0: uniform)."""
    priority_beta: float = 0.4
    """Importance-sampling exponent at the start; it rises linearly to 1 over priority_beta_steps."""
    priority_beta_steps: int = AUTO
    """Env steps (transitions inserted) over which beta rises to 1; -1: the run's --total-env-steps, else 500,000."""
    priority_eps: float = 1e-3
    """Added to |TD error| so that no slot's priority is 0 (TD errors are in reward_scale units)."""

    def beta_steps(self, budget: int = 0) -> int:
        """Env steps over which beta rises to 1 in a run of ``budget`` (0: none): priority_beta_steps, its auto resolved."""
        return self.priority_beta_steps if self.priority_beta_steps != AUTO else (budget or DEFAULT_BETA_STEPS)

    def beta_at(self, inserted: int, budget: int = 0) -> float:
        """The importance-sampling exponent after ``inserted`` transitions of a run of ``budget`` (0: none)."""
        steps = self.beta_steps(budget)
        if steps <= 0:
            return 1.0
        return self.priority_beta + (1.0 - self.priority_beta) * min(1.0, inserted / steps)

    def validate(self) -> None:
        _check(self.capacity >= 64, "replay.capacity", self.capacity, "must be >= 64")
        _check(1 <= self.n_step <= 64, "replay.n_step", self.n_step, "must be in [1, 64]")
        _check(self.gamma == AUTO or 0.0 < self.gamma <= 1.0, "replay.gamma", self.gamma, "must be in (0, 1] (-1: auto)")
        initial = self.initial_priority
        _check(initial in ("actor", "max"), "replay.initial_priority", initial, "must be 'actor' or 'max'")
        _check(0.0 <= self.priority_alpha <= 1.0, "replay.priority_alpha", self.priority_alpha, "must be in [0, 1]")
        _check(0.0 <= self.priority_beta <= 1.0, "replay.priority_beta", self.priority_beta, "must be in [0, 1]")
        _check_range(
            self, "replay.priority_beta_steps", AUTO, math.inf, "must be an integer >= 0 (0: beta is 1 from the start; -1: auto)"
        )
        _check(self.priority_eps > 0.0, "replay.priority_eps", self.priority_eps, "must be > 0")


@dataclass
class TransportConfig:
    """Sockets between actors and learner."""

    host: str = "127.0.0.1"
    """Address the learner binds and actors connect to. Anything but loopback requires CURVE keys (the curve_* options)."""
    base_port: int = 5600
    """Actor slot i sends experience to base_port + i; weights go out on base_port - 1 (PUB) and are served on request
    on base_port - 2. Two runs on one machine need ranges that do not overlap."""
    max_message_bytes: int = 64 << 20
    """Largest message the learner accepts; a peer that sends more is disconnected by ZeroMQ."""
    recv_hwm: int = 8
    """ZeroMQ receive high-water mark per actor socket, in messages."""
    consolidated_queue: int = 32
    """Decoded batches waiting to be written into replay; when full the consolidation thread stops reading (back-pressure)."""
    max_staged_bytes: int = 256 << 20
    """Largest total of the decoded batches waiting in that queue, in bytes: past it the consolidation thread stops
    reading as when the queue is full (an empty queue takes any one batch)."""
    max_env_per_message: int = 64
    """Largest envs-per-actor a message may claim (validation bound)."""
    max_steps_per_message: int = 4096
    """Largest steps-per-env a message may claim (validation bound)."""
    tcp_keepalive_idle: int = 60
    """Seconds a silent TCP link waits before the OS sends keepalive probes, below Docker Swarm's 900 s idle cut (0: off)."""
    tcp_keepalive_interval: int = 10
    """Seconds between TCP keepalive probes once a link is silent."""
    tcp_keepalive_count: int = 6
    """Unanswered TCP keepalive probes after which the OS drops the link (ZeroMQ then reconnects)."""
    heartbeat_interval: float = 10.0
    """Seconds between ZeroMQ (ZMTP) heartbeats on every socket; 0 turns them off."""
    heartbeat_timeout: float = 30.0
    """Seconds without traffic or heartbeat reply after which a peer is disconnected (the actor side reconnects by itself)."""
    slot_lease: float = 30.0
    """Seconds a slot stays with its actor after its last message before another actor may take it (unless the launcher
    restarted the slot's process); others' messages meanwhile are rejected as ``slot_owned``."""
    curve_server_secret: str = ""
    """Learner: its secret CURVE certificate (NAME.key_secret); with curve_authorized_dir it encrypts every learner socket."""
    curve_authorized_dir: str = ""
    """Learner: folder of the actors' public certificates (*.key) it admits; every other key is refused (ZAP allow-list)."""
    curve_client_secret: str = ""
    """Actor: its secret CURVE certificate (NAME.key_secret); its public half must be in the learner's curve_authorized_dir."""
    curve_server_public: str = ""
    """Actor: the learner's public certificate (learner.key), so the actor talks only to that learner."""
    open_loopback: bool = False
    """launch.local spawning its actors on loopback with no curve_* option: plain TCP, open to every local user,
    instead of CURVE with keys made for the run in RUN/keys."""

    def validate(self) -> None:
        for pair in (("curve_server_secret", "curve_authorized_dir"), ("curve_client_secret", "curve_server_public")):
            for name, other in (pair, pair[::-1]):
                value, rule = getattr(self, name), f"must be set when transport.{other} is (CURVE keys come in pairs)"
                _check(bool(value) or not getattr(self, other), f"transport.{name}", value, rule)
        certs = {"curve_server_secret": "secret", "curve_client_secret": "secret", "curve_server_public": "public"}
        keys = "python -m launch.keys writes NAME.key (public) and NAME.key_secret"
        for name, kind in certs.items():
            path = getattr(self, name)
            _check(not path or os.path.isfile(path), f"transport.{name}", path, "is not a file")
            _check(not path or _cert_holds(path, kind), f"transport.{name}", path, f"holds no {kind} key ({keys})")
        folder, name = self.curve_authorized_dir, "transport.curve_authorized_dir"
        _check(not folder or os.path.isdir(folder), name, folder, "is not a folder")
        found = not folder or any(f.endswith(".key") for f in os.listdir(folder))
        _check(found, name, folder, "holds no public key (*.key): no actor could connect")
        _check(
            is_loopback(self.host) or bool(self.curve_server_secret or self.curve_client_secret),
            "transport.host",
            self.host,
            "is not loopback: remote actors need CURVE; give the learner --transport.curve-server-secret "
            "and --transport.curve-authorized-dir, the actors --transport.curve-client-secret and "
            "--transport.curve-server-public (python -m launch.keys makes the keys)",
        )
        _check(1026 <= self.base_port <= 65000, "transport.base_port", self.base_port, "must be in [1026, 65000]")
        _check(self.max_message_bytes >= 1 << 16, "transport.max_message_bytes", self.max_message_bytes, "must be >= 65536")
        _check(self.recv_hwm >= 1, "transport.recv_hwm", self.recv_hwm, "must be >= 1")
        _check(self.consolidated_queue >= 1, "transport.consolidated_queue", self.consolidated_queue, "must be >= 1")
        staged, rule = self.max_staged_bytes, "must be an integer >= 1048576 (1 MiB)"
        _check(_is_int(staged) and staged >= 1 << 20, "transport.max_staged_bytes", staged, rule)
        _check(
            not (self.open_loopback and (self.curve_server_secret or self.curve_client_secret)),
            "transport.open_loopback",
            self.open_loopback,
            "must be off when CURVE keys are given (transport.curve_*): the keys would be used",
        )
        _check_range(self, "transport.tcp_keepalive_idle", 0, 7200, "must be in [0, 7200] seconds (0: off)", integer=False)
        _check_range(self, "transport.tcp_keepalive_interval", 1, 600, "must be in [1, 600] seconds", integer=False)
        _check_range(self, "transport.tcp_keepalive_count", 1, 100, "must be in [1, 100]", integer=False)
        beat = self.heartbeat_interval
        _check(
            beat == 0 or 0.1 <= beat <= 3600, "transport.heartbeat_interval", beat, "must be 0 (off) or in [0.1, 3600] seconds"
        )
        _check(0.5 <= self.slot_lease <= 86400, "transport.slot_lease", self.slot_lease, "must be in [0.5, 86400] seconds")
        rule = "must be above transport.heartbeat_interval and at most 6553 seconds (ZeroMQ's bound)"
        _check(beat == 0 or beat < self.heartbeat_timeout <= 6553, "transport.heartbeat_timeout", self.heartbeat_timeout, rule)


@dataclass
class LearnerConfig:
    """The learner: an n-step TD rule (Double DQN or Munchausen-DQN), gradient accumulation, compiled network, opt-in AMP."""

    micro_batch: int = AUTO
    """Samples per micro-step (one forward/backward); -1: auto, 512 on CUDA, 64 on CPU."""
    accum_steps: int = AUTO
    """Micro-steps accumulated per optimizer update (effective batch = micro_batch * accum_steps); -1: auto, 1."""
    reward_scale: float = AUTO
    """Rewards are multiplied by this in the TD target (replay and logged returns stay in game units); -1: the env's
    (Mario 1/15, Snake 1/10, fuel breaks 100, else 1)."""
    lr: float = 2.5e-4
    """Adam learning rate."""
    adam_eps: float = 1.5e-4
    """Adam epsilon."""
    max_grad_norm: float = 10.0
    """Gradient-norm clipping threshold (0: off)."""
    target_sync_env_steps: int = AUTO
    """Env steps between target-network syncs; -1: the env's (Mario 16,000, fuel breaks 32,000, others 2,000)."""
    rule: Literal["auto", "double", "munchausen"] = "auto"
    """The TD rule (shared/targets.py): 'double' (Double DQN) or 'munchausen' (Munchausen-DQN, the munchausen_*
    options); 'auto': the env's (munchausen on Mario, double elsewhere)."""
    munchausen_alpha: float = AUTO
    """Munchausen-DQN's weight of the scaled log-policy bonus (rule munchausen only); -1: the env's (0.9 for built-in envs)."""
    munchausen_tau: float = 0.03
    """Munchausen-DQN's softmax temperature, in units of scaled Q (the paper's 0.03 for rewards in [-1, 1])."""
    reset_env_steps: int = 0
    """Env steps between network resets (learner/resets.py), none within one period of --total-env-steps (0: never)."""
    reset_shrink: float = 0.8
    """alpha of a reset's shrink-and-perturb, theta <- alpha * theta + (1 - alpha) * theta0 (SR-SPR's 0.8)."""
    updates_per_epoch: int = 20
    """Updates in one epoch (the unit of logging and checkpoint periods)."""
    broadcast_env_steps: int = AUTO
    """Env steps between weight broadcasts to the actors; -1: the env's (fuel breaks 12,288, others 1,600)."""
    checkpoint_seconds: float = 60.0
    """Seconds between checkpoints (at the next epoch end; one is also written at exit); 0: by checkpoint_every only."""
    checkpoint_every: int = 0
    """Epochs between checkpoints as well, whatever the time (0: by checkpoint_seconds only)."""
    replay_every: int = 1
    """Save the replay with every Kth checkpoint, as well as at a stop before the budget (0: only then). A resume uses a
    replay only beside the checkpoint it was saved with, so 1 alone keeps it through a crash: Mario's, 100K x (84x84 + 15)
    B = 707 MB, is then written each minute, the loop pausing only for its copy into the page cache (the fsync runs on
    the checkpoint's thread)."""
    samples_per_insert: float = 4.0
    """Samples trained per transition inserted into replay (the replay ratio): the learner never trains past it;
    with exact_ratio it also never falls more than ratio_slack transitions behind it. 0: unlimited."""
    exact_ratio: bool = True
    """Hold the replay ratio from both sides (actors wait while the learner trails it), so a run trains the same
    samples per env step on any machine; --learner.no-exact-ratio makes it a cap only."""
    ratio_slack: int = 4096
    """Transitions the learner may take in beyond samples_per_insert's share before it waits (exact_ratio)."""
    min_replay: int = 5000
    """Transitions in replay before training starts."""
    amp: Literal["auto", "off", "bf16", "fp16"] = "auto"
    """Mixed precision of the learner's convolutions (head and Q-values stay fp32); auto: off, so the learner trains the
    fp32 function the actors play; bf16 or fp16 (with a gradient scaler) trade that for speed."""
    compile: bool = True
    """torch.compile the network (learner/trainer.py), compiled and warmed up before the first epoch."""
    steps: int = 0
    """Stop after this many updates in total, counting resumed ones (0: no limit); the run ends as with --duration."""
    threads: int = AUTO
    """Torch intra-op threads of the learner; -1: auto, the cores local actors leave free (at least 1)."""
    seed: int = -1
    """Seed of network initialisation and sampling; -1: the run's --seed."""
    max_weights_lag: int = 8
    """Batches played with weights more than this many versions old are dropped as stale_weights (0: no limit)."""

    def validate(self) -> None:
        _check_range(self, "learner.micro_batch", 1, 65536, "must be in [1, 65536] (-1: auto)", integer=False, auto=AUTO)
        _check_range(self, "learner.accum_steps", 1, 1024, "must be in [1, 1024] (-1: auto)", integer=False, auto=AUTO)
        _check(0 < self.lr < 1, "learner.lr", self.lr, "must be in (0, 1)")
        _check(self.max_grad_norm >= 0, "learner.max_grad_norm", self.max_grad_norm, "must be >= 0")
        _check_range(self, "learner.target_sync_env_steps", 1, math.inf, "must be an integer >= 1 (-1: auto)", auto=AUTO)
        _check_range(self, "learner.reset_env_steps", 0, math.inf, "must be an integer >= 0 (0: never)")
        _check(0.0 <= self.reset_shrink <= 1.0, "learner.reset_shrink", self.reset_shrink, "must be in [0, 1]")
        _check(self.rule in ("auto", "double", "munchausen"), "learner.rule", self.rule, "must be auto, double or munchausen")
        _check_range(self, "learner.munchausen_alpha", 0, 1, "must be in [0, 1] (-1: auto)", integer=False, auto=AUTO)
        why = "must be > 0 under learner.rule='munchausen' (alpha 0 once meant Double DQN: --learner.rule double)"
        _check(self.rule != "munchausen" or self.munchausen_alpha != 0, "learner.munchausen_alpha", self.munchausen_alpha, why)
        _check(self.munchausen_tau > 0, "learner.munchausen_tau", self.munchausen_tau, "must be > 0")
        _check(self.updates_per_epoch >= 1, "learner.updates_per_epoch", self.updates_per_epoch, "must be >= 1")
        _check_range(self, "learner.broadcast_env_steps", 1, math.inf, "must be an integer >= 1 (-1: auto)", auto=AUTO)
        _check(self.checkpoint_every >= 0, "learner.checkpoint_every", self.checkpoint_every, "must be >= 0 (0: off)")
        _check(self.checkpoint_seconds >= 0, "learner.checkpoint_seconds", self.checkpoint_seconds, "must be >= 0 (0: off)")
        rule = "and learner.checkpoint_seconds cannot both be 0: a run would keep no checkpoint before its exit"
        _check(self.checkpoint_every > 0 or self.checkpoint_seconds > 0, "learner.checkpoint_every", self.checkpoint_every, rule)
        _check_range(self, "learner.replay_every", 0, math.inf, "must be an integer >= 0 (0: only at a stop before the budget)")
        _check(self.samples_per_insert >= 0, "learner.samples_per_insert", self.samples_per_insert, "must be >= 0")
        _check(self.ratio_slack >= 0, "learner.ratio_slack", self.ratio_slack, "must be >= 0")
        _check(self.min_replay >= 1, "learner.min_replay", self.min_replay, "must be >= 1")
        _check(self.amp in ("auto", "off", "bf16", "fp16"), "learner.amp", self.amp, "must be auto, off, bf16 or fp16")
        scale = self.reward_scale
        _check(scale == AUTO or scale > 0, "learner.reward_scale", scale, "must be > 0 (-1: auto)")
        _check(self.steps >= 0, "learner.steps", self.steps, "must be >= 0")
        _check(self.threads == AUTO or self.threads >= 1, "learner.threads", self.threads, "must be >= 1 (-1: auto)")
        _check(self.max_weights_lag >= 0, "learner.max_weights_lag", self.max_weights_lag, "must be >= 0 (0: no limit)")

    @property
    def holds_ratio(self) -> bool:
        """Whether the replay ratio is held from below too (exact_ratio with a ratio set): actors then wait, not drop."""
        return self.exact_ratio and self.samples_per_insert > 0

    def resolved(self, device_type: str) -> LearnerConfig:
        """A copy with the device's autos set (batch 512 on CUDA, 64 on CPU; accumulation 1); env autos must be resolved."""
        for key in ENV_AUTO_FIELDS["learner"]:
            value = getattr(self, key)
            _check(value not in AUTOS, f"learner.{key}", value, "is still auto: resolve the run's config first")
        cuda = device_type == "cuda"
        return dataclasses.replace(
            self,
            micro_batch=(512 if cuda else 64) if self.micro_batch == AUTO else self.micro_batch,
            accum_steps=1 if self.accum_steps == AUTO else self.accum_steps,
        )


SEEDED_SECTIONS = ("actor", "learner", "eval")  # each has a seed; -1 takes RunConfig.seed
ENV_AUTO_FIELDS: dict[str, tuple[str, ...]] = {
    "": ("total_env_steps",),
    "env": ("max_episode_steps",),
    "replay": ("gamma",),
    "actor": ("envs_per_actor", "eps_anneal_env_steps"),
    "learner": ("reward_scale", "target_sync_env_steps", "broadcast_env_steps", "munchausen_alpha", "rule"),
}
"""Options whose auto (-1, a string's 'auto') is the env's value, by section ('' the run), set by shared/resolution.py."""


@dataclass
class NetConfig:
    """The Q-network's shape (shared/network.py), the same at the learner, the actors and the evaluator."""

    dueling: bool = True
    """Dueling head (Q = V(s) + A(s, a) - mean_a A(s, a)), so small action gaps are learned apart from V; off: Nature-DQN's."""


@dataclass
class EvalConfig:
    """Evaluation during training: a separate process plays the current weights, never stalling training."""

    every_env_steps: int = 32_000
    """Env steps between evaluations, skipped while the last still runs (0: off); the best-scoring weights are kept as best.pt."""
    episodes: int = 10
    """Episodes per evaluation."""
    epsilon: float = 0.05
    """Exploration during evaluation (the emulator is deterministic: at 0 every episode is the same one)."""
    stage: str = ""
    """Mario stage to evaluate on; empty: the training stage."""
    keep_snapshots: int = 3
    """Best-scoring evaluated weights kept as snapshots/v*.pt, which at the run's end may replace the last weights as
    best.pt if better beyond chance (launch/final_eval.py); 0: the in-training best."""
    select_episodes: int = 30
    """Episodes the last weights and each kept snapshot play at the run's end to choose best.pt (not those they are scored on)."""
    final_episodes: int = 50
    """Episodes the last weights and best.pt each play at the end of the run, at --eval.epsilon on seeds no
    in-training evaluation used, plus one greedy episode; eval_final.json (0: no final evaluation)."""
    seed: int = -1
    """Seed of the evaluations' exploration and envs (each draws its own stream from it); -1: the run's --seed."""
    keep_weights: int = 4
    """Broadcast weights kept in the run folder's kept/ (the last K, spaced by keep_weights_env_steps), the late window
    the final evaluation scores, so that no single broadcast decides a run (0: none)."""
    keep_weights_env_steps: int = 10_000
    """Env steps between kept weights (the first broadcast at or past each multiple is kept)."""
    late_episodes: int = 25
    """Episodes each kept weights play at --eval.epsilon in the final evaluation (the late-window row)."""
    low_epsilon: float = 0.01
    """The secondary row's exploration: the last weights (and each baseline) at this epsilon."""
    low_epsilon_episodes: int = 50
    """Episodes of the low-epsilon row (0: no such row)."""
    noop_episodes: int = 30
    """Episodes of the greedy row after 0-noop_max random no-op steps (DQN Zoo's protocol; 0: no such row)."""
    noop_max: int = 30
    """The most no-op steps before a no-op row's greedy episode takes over (uniform in [0, noop_max])."""
    drill_trials: int = 0
    """Trials per drill point and variant the last weights play at the run's end, at --eval.epsilon: each hazard from a
    saved state drill_lead steps before it, plain and with one forced random press (shared/evaluation/drills.py; envs
    that save their state; 0: no drills)."""
    drill_lead: int = 12
    """Agent steps from a drill point's state to its hazard."""

    def validate(self) -> None:
        _check_range(self, "eval.every_env_steps", 0, math.inf, "must be an integer >= 0 (0: off)")
        _check(1 <= self.episodes <= 1000, "eval.episodes", self.episodes, "must be in [1, 1000]")
        _check(0.0 <= self.epsilon <= 1.0, "eval.epsilon", self.epsilon, "must be in [0, 1]")
        _check_range(self, "eval.keep_snapshots", 0, 20, "must be an integer in [0, 20]")
        _check_range(self, "eval.select_episodes", 2, 1000, "must be an integer in [2, 1000] (the choice compares their spread)")
        _check_range(self, "eval.final_episodes", 0, 1000, "must be an integer in [0, 1000] (0: no final evaluation)")
        _check_range(self, "eval.keep_weights", 0, 64, "must be an integer in [0, 64] (0: none kept)")
        _check_range(self, "eval.keep_weights_env_steps", 1, math.inf, "must be an integer >= 1")
        for name in ("late_episodes", "low_epsilon_episodes", "noop_episodes"):
            _check_range(self, f"eval.{name}", 0, 1000, "must be an integer in [0, 1000] (0: no such row)")
        _check(0.0 <= self.low_epsilon <= 1.0, "eval.low_epsilon", self.low_epsilon, "must be in [0, 1]")
        _check_range(self, "eval.noop_max", 0, 1000, "must be an integer in [0, 1000]")
        _check_range(self, "eval.drill_trials", 0, 1000, "must be an integer in [0, 1000] (0: no drills)")
        _check_range(self, "eval.drill_lead", 1, 1000, "must be an integer in [1, 1000]")


@dataclass
class RunConfig:
    """warppipe local run: N Mario collector processes feeding one learner."""

    actors: int = 4
    """Number of collector processes (actor slots 0..N-1)."""
    collect_only: bool = False
    """Collect experience into replay without training (the data plane alone)."""
    duration: float = 0.0
    """Stop after this many seconds of this invocation (0: no time limit); the work done in it depends on the machine."""
    label: str = ""
    """A name for the group of runs this one belongs to (e.g. 'lr1e-4'): launch.tools.report groups runs by it."""
    seed: int = -1
    """The run's seed, from which every component derives its own; -1: the launcher draws one and saves it in config.json."""
    total_env_steps: int = AUTO
    """Stop once this many env steps were inserted into replay over the whole run, resumes included, after the final
    checkpoint and evaluation (0: no limit; -1: the env's budget, Mario 300,000, others none)."""
    log_every: float = 5.0
    """Seconds between the console lines."""
    device: str = "auto"
    """Learner device: 'auto' (cuda if available), 'cpu' or 'cuda[:i]'. The replay lives there."""
    run_dir: str = "runs"
    """Folder in which each run gets its own sub-folder."""
    env: EnvConfig = field(default_factory=EnvConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    transport: TransportConfig = field(default_factory=TransportConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    net: NetConfig = field(default_factory=NetConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    resume: str = ""
    """Run folder to resume (its config and last checkpoint); counters and weights_version continue. 'latest': the
    newest run under run_dir with a checkpoint, or a new run when there is none."""
    progress: bool = True
    """Show a live progress bar with ETA toward the budget set: --total-env-steps, else --learner.steps, else --duration."""
    spawn_actors: bool = True
    """Start the N actor processes here; --no-spawn-actors (python -m launch.learner): bind the N slots for external actors."""

    def validate(self) -> RunConfig:
        """Check every field (ConfigError names the first bad one); returns self. The env's auto fields must have
        been resolved (shared/resolution.py, which calls this); the env's own options are checked there."""
        for section, keys in ENV_AUTO_FIELDS.items():
            for key in keys:
                name = f"{section}.{key}" if section else key
                value = getattr(getattr(self, section) if section else self, key)
                _check(value not in AUTOS, name, value, "is still auto: resolve the config with shared.resolution first")
        _check(1 <= self.actors <= 256, "actors", self.actors, "must be in [1, 256]")
        _check(self.duration >= 0, "duration", self.duration, "must be >= 0 (0: no time limit)")
        _check_range(self, "seed", -1, 2**31 - 1, "must be an integer in [0, 2**31) (-1: draw one)")
        for section in SEEDED_SECTIONS:
            _check_range(getattr(self, section), f"{section}.seed", 0, 2**31 - 1, "must be an integer in [0, 2**31)")
        _check_range(self, "total_env_steps", 0, math.inf, "must be an integer >= 0 (0: no limit; -1: the env's budget)")
        _check(self.log_every > 0, "log_every", self.log_every, "must be > 0")
        device = self.device
        _check(device in ("auto", "cpu") or device.startswith("cuda"), "device", device, "must be 'auto', 'cpu' or 'cuda[:i]'")
        for part in (self.env, self.actor, self.replay, self.transport, self.learner, self.eval):
            part.validate()
        _check(
            not (self.spawn_actors and self.transport.curve_server_secret and not self.transport.curve_client_secret),
            "transport.curve_client_secret",
            self.transport.curve_client_secret,
            "must be set (with transport.curve_server_public) when the learner uses CURVE and spawns its own actors "
            "(or pass --no-spawn-actors and run remote actors)",
        )
        for name, bound in (("envs_per_actor", "max_env_per_message"), ("batch_steps", "max_steps_per_message")):
            value = getattr(self.actor, name)
            _check(value <= getattr(self.transport, bound), f"actor.{name}", value, f"must not exceed transport.{bound}")
        _check(
            not self.learner.reset_env_steps or self.learner.reset_env_steps > self.learner.min_replay,
            "learner.reset_env_steps",
            self.learner.reset_env_steps,
            f"must be 0 (never) or more than learner.min_replay={self.learner.min_replay}: a reset before training "
            "starts would reset an untrained net",
        )
        streams = self.actors * self.actor.envs_per_actor
        per_stream = self.replay.capacity // streams
        need = self.env.stack + self.replay.n_step + 2 * self.actor.batch_steps
        rule = f"is too small: each of the {streams} streams needs room for at least two batches plus a stack"
        _check(per_stream >= need, "replay.capacity", self.replay.capacity, rule)
        return self

    def to_json(self) -> str:
        """The config as JSON, each env's options under its name in ``env`` (``env.mario.stage``), as on the command line."""
        data = {**dataclasses.asdict(self), "env": self.env.to_dict()}
        return json.dumps(data, indent=2, sort_keys=True)


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses (127.0.0.0/8, ::1): nothing off this machine can connect."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _cert_holds(path: str, kind: str) -> bool:
    """Whether a ZeroMQ certificate file has a ``public-key`` / ``secret-key`` line (read without zmq)."""
    try:
        with open(path, encoding="utf-8") as fh:
            return any(line.strip().startswith(f"{kind}-key") for line in fh)
    except (OSError, UnicodeDecodeError):
        return False


def flatten(d: dict, prefix: str = "") -> dict:
    """Every value of the nested dict ``d`` by its dotted name (``learner.lr``, ``env.mario.stage``)."""
    out: dict = {}
    for key, value in d.items():
        out.update(flatten(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value})
    return out


def from_dict(cls: type, data: dict) -> Any:
    """Build dataclass ``cls`` from a dict, recursing into nested dataclasses; unknown keys are an error."""
    names = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise ConfigError(f"unknown config key(s) for {cls.__name__}: {unknown}")
    kwargs = {}
    for key, value in data.items():
        factory = names[key].default_factory
        if factory is not dataclasses.MISSING and dataclasses.is_dataclass(factory):
            value = from_dict(factory, value)
        kwargs[key] = value
    return cls(**kwargs)
