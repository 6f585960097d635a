"""A collector process: plays its envs epsilon-greedily and streams batches to the learner.

How a transition travels from here to replay: docs/architecture.md.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
import warnings
from collections.abc import Callable
from typing import Any, cast

import numpy as np
import torch

from actors.sender import BatchSender, StagedBatch
from actors.slot_client import lease_slot
from actors.starts import StartChooser
from actors.weights_client import WeightClient
from shared.config import RunConfig
from shared.envs.frames import FrameVectorEnv
from shared.exploration import EpsilonGreedy, epsilons
from shared.heartbeat import Heartbeat
from shared.network import acting_copy, build_q_network, cpu_has_native_bf16
from shared.orphans import orphan_check
from shared.priorities import n_step_priorities
from shared.resolution import Resolved, resolve_run
from shared.targets import build_rule
from shared.wire.links import held_kernel_buffer
from shared.wire.protocol import action_dtype

# Received weight arrays are read-only views on ZeroMQ frames; load_state_dict only copies from them.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")


_LATE_CHUNK = 8  # fewest stacks in one forward pass of the batched priority Q (see Collector._late_q_values)

VERSION_REJECTS_TO_EXIT = 3  # weights broadcasts of another protocol version after which an actor exits


def env_seed(base_seed: int, actor_id: int, env_index: int) -> int:
    """Seed of env ``env_index`` of actor slot ``actor_id``: stable across restarts, so runs are reproducible."""
    return int(np.random.SeedSequence([base_seed, actor_id, env_index]).generate_state(1)[0])


class Collector:
    """Steps E envs, batches T ticks, hands batches to a BatchSender."""

    def __init__(self, run: Resolved, actor_id: int, incarnation: int, generation: int = -1):
        """``generation``: this slot's start count (0 first), keying the exploration stream (-1: keyed by the incarnation)."""
        self.cfg = cfg = run.cfg
        self.actor_id, self.incarnation = actor_id, incarnation
        n_env = cfg.actor.envs_per_actor
        self.spec = spec = run.spec
        stream = generation if generation >= 0 else (incarnation & 0xFFFFFFFF) | (1 << 32)  # never a generation
        self.policy = EpsilonGreedy(np.random.default_rng([cfg.actor.seed, actor_id, stream]), spec.num_actions)
        self.env = run.entry.make(cfg.env, [env_seed(cfg.actor.seed, actor_id, e) for e in range(n_env)])
        self.num_actions, self.masked = spec.num_actions, spec.masked
        self.env_steps = 0  # steps of each env (they advance in lockstep)
        self.run_env_steps = 0  # each env's share of the run's env steps, from the weights (see load_weights)
        self.epsilon = epsilons(cfg.actor, cfg.actors, actor_id, 0)
        self.net = build_q_network(spec, dueling=cfg.net.dueling).eval()  # the learner's layout
        self.acting_net = acting_copy(self.net, cfg.actor.precision)  # what acts: rebuilt from every load
        self.actor_priorities = cfg.replay.prioritized and cfg.replay.initial_priority == "actor"
        learner = run.learner
        self.reward_scale = learner.reward_scale  # the learner's TD-error units
        # the learner's target rule, so a transition's first priority is on the scale of its later ones
        self.rule = build_rule(learner.rule, learner.munchausen_alpha, learner.munchausen_tau)
        self.weights_version = 0
        self.weights_run = 0  # the run those weights came from (0: none yet)
        self.first_action_weights_version = -1  # the weights the very first action used (tests check it)
        self.env_seconds = 0.0  # wall time inside the envs' step: the share of the actor's time its envs get
        self.first, self.episode_return = np.ones(n_env, dtype=np.uint8), np.zeros(n_env)
        self.finished: list[np.ndarray] = []  # float32 [k, 4] (return, score, success, start) since the last batch
        self.stats: dict[str, float] = dict(
            steps=0, episodes=0, last_return=0.0, last_score=0, successes=0, fps=0.0, epsilon=float(self.epsilon.mean())
        )
        self.obs = self.env.reset()  # [E, *obs_shape]: the observation each env's next action is chosen at
        if spec.stack > 1:  # the network's input: the last `stack` observations (the reset one repeated)
            self.stacks = np.empty((n_env, spec.stack, *spec.obs_shape), dtype=spec.obs_dtype)
            self.stacks[:] = self.obs[:, None]
        else:
            self.stacks = self.obs
        self.mask = self.env.action_mask() if self.masked else None
        self.starts: StartChooser | None = None  # where each next episode starts (actor.start_share > 0)
        a = cfg.actor
        if a.start_share > 0:
            hazards = run.entry.hazards_of(cfg.env)
            rng = np.random.default_rng([cfg.actor.seed, actor_id, stream, 83])
            self.starts = StartChooser(n_env, rng, a.start_share, a.start_lead, a.frontier_share, a.frontier_burst, hazards)
            cast(FrameVectorEnv, self.env).starts = self.starts.choose  # entry.states: single frame envs side by side

    def load_weights(self, version: int, arrays: dict[str, np.ndarray], run: int = 0, env_steps: int = 0) -> None:
        """Act with weights ``version`` of run ``run`` from now on; ``env_steps`` (the run's) sets the exploration clock."""
        self.net.load_state_dict({name: torch.from_numpy(a) for name, a in arrays.items()})
        self.acting_net = acting_copy(self.net, self.cfg.actor.precision)
        self.weights_version, self.weights_run = version, run
        self.run_env_steps = max(self.run_env_steps, env_steps // (self.cfg.actors * self.cfg.actor.envs_per_actor))

    def q_values(self) -> np.ndarray:
        """Q of every env's current stack, float32 [E, A] (one batched forward pass)."""
        with torch.inference_mode():
            return self.acting_net(torch.from_numpy(self.stacks)).numpy()

    def _late_q_values(self, ticks: list[np.ndarray]) -> np.ndarray:
        """Q of the stacks of several ticks, float32 [len(ticks), E, A], in passes of one size (the last padded), as
        oneDNN keeps buffers for every input shape it sees."""
        n_env = self.env.num_envs
        per_pass = -(-_LATE_CHUNK // n_env)  # ticks
        padded = ticks + [ticks[-1]] * (-len(ticks) % per_pass)
        with torch.inference_mode():
            q = [
                self.acting_net(torch.from_numpy(np.concatenate(padded[i : i + per_pass]))).numpy()
                for i in range(0, len(padded), per_pass)
            ]
        return np.concatenate(q)[: len(ticks) * n_env].reshape(len(ticks), n_env, -1)

    def act(self) -> tuple[np.ndarray, np.ndarray | None]:
        """Epsilon-greedy actions of every env and the Q [E, A] they were chosen with (None: every env explored)."""
        if self.first_action_weights_version < 0:
            self.first_action_weights_version = self.weights_version
        return self.policy.choose(self.epsilon, self.q_values, self.mask)

    def collect(self, n_steps: int, seq: int, refresh: Callable[[int], Any] | None = None) -> StagedBatch:
        """Play ``n_steps`` ticks of every env as one batch; ``refresh(have)`` gives newer weights between ticks, or None."""
        n_env, spec = self.env.num_envs, self.spec
        frames = np.empty((n_env, n_steps, *spec.obs_shape), dtype=spec.obs_dtype)
        actions = np.empty((n_env, n_steps), dtype=action_dtype(self.num_actions))
        rewards = np.empty((n_env, n_steps), dtype=np.float32)
        terminated = np.zeros((n_env, n_steps), dtype=np.uint8)
        first = np.empty((n_env, n_steps), dtype=np.uint8)
        masks = np.empty((n_env, n_steps + 1, self.num_actions), bool) if self.masked else None  # + the one after
        q = np.empty((n_env, n_steps + 1, self.num_actions), np.float32) if self.actor_priorities else None
        unscored: list[int] = []  # ticks whose Q no action needed (every env explored): one batched forward at the end
        unscored_stacks: list[np.ndarray] = []
        stacked = spec.stack > 1
        start = time.perf_counter()
        batch_version, batch_run = -1, 0  # the weights of the batch's first step: the oldest it was played with
        for t in range(n_steps):
            if refresh is not None and (newer := refresh(self.weights_version)) is not None:
                self.load_weights(*newer)
            if t == 0:
                batch_version, batch_run = self.weights_version, self.weights_run
            clock = max(self.env_steps, self.run_env_steps)  # the exploration schedule's clock
            self.epsilon = epsilons(self.cfg.actor, self.cfg.actors, self.actor_id, clock)
            if self.starts is not None:  # a frontier burst or a forced press
                self.epsilon = self.starts.epsilon(self.epsilon)
            frames[:, t] = self.obs
            first[:, t] = self.first
            if masks is not None:
                masks[:, t] = self.mask
            actions[:, t], q_t = self.act()
            if q is not None:
                if q_t is None:
                    unscored.append(t)
                    unscored_stacks.append(self.stacks.copy())  # the step below moves the stacks on
                else:
                    q[:, t] = q_t
            tick = time.perf_counter()
            obs, reward, term, trunc, info = self.env.step(actions[:, t])
            self.env_seconds += time.perf_counter() - tick
            rewards[:, t] = reward
            terminated[:, t] = term
            self.episode_return += reward
            done = term | trunc
            if stacked:
                self.stacks[:, :-1] = self.stacks[:, 1:]
                self.stacks[:, -1] = obs
            else:
                self.stacks = obs
            self.obs = obs
            self.first = done.astype(np.uint8)
            if done.any():
                self._new_episodes(np.flatnonzero(done), obs, info)
            if self.starts is not None:
                self.starts.stepped(self.env, info["score"], ~done)
            if self.masked:
                self.mask = self.env.action_mask()
            self.env_steps += 1
        self.stats["steps"] += n_steps * n_env
        self.stats["fps"] = n_steps * n_env / max(time.perf_counter() - start, 1e-9)
        self.stats["epsilon"] = float(self.epsilon.mean())
        episodes = np.concatenate(self.finished) if self.finished else np.zeros((0, 4), np.float32)
        self.finished.clear()
        packed = None
        if masks is not None:
            masks[:, n_steps] = self.mask
            packed = np.packbits(masks[:, :n_steps], axis=-1, bitorder="little")
        priorities = None
        if q is not None:  # Ape-X: initial priorities from this actor's own n-step TD errors
            unscored.append(n_steps)  # the bootstrap: the stacks after the batch's last step
            unscored_stacks.append(self.stacks)
            q[:, unscored] = self._late_q_values(unscored_stacks).swapaxes(0, 1)
            r = self.cfg.replay
            priorities = n_step_priorities(
                q, actions, rewards, terminated, first, self.first, r.n_step, r.gamma, self.reward_scale, masks, self.rule
            )
        return StagedBatch(
            seq, batch_version, (frames, actions, rewards, terminated, first), episodes, priorities, packed, batch_run
        )

    def _new_episodes(self, ended: np.ndarray, obs: np.ndarray, info: dict[str, Any]) -> None:
        """Envs ``ended`` finished an episode and began the next (``obs``): record the finished, set the new stacks."""
        if self.spec.stack > 1:  # a new episode's stack is its first observation repeated (replay rebuilds it so)
            self.stacks[ended] = obs[ended, None]
        where = None  # every episode at the true start
        if self.starts is not None:
            where = self.starts.ended(ended, info["score"][ended], info["success"][ended])
        self._end_episodes(ended, info, where)

    def _end_episodes(self, ended: np.ndarray, info: dict[str, Any], where: np.ndarray | None) -> None:
        """Record the episodes of envs ``ended`` (return, score, success, where they started: None, all at the true
        start); ``info`` was read before their reset."""
        returns = self.episode_return[ended]
        score, success = info["score"][ended], info["success"][ended]
        start = np.zeros(len(ended)) if where is None else where
        self.stats["episodes"] += len(ended)
        self.stats["last_return"] = float(returns[-1])
        self.stats["last_score"] = float(score[-1])
        self.stats["successes"] += int(success.sum())
        self.finished.append(np.stack([returns, score, success, start], 1).astype(np.float32))
        self.episode_return[ended] = 0.0

    def close(self) -> None:
        self.env.close()


def actor_main(
    cfg: RunConfig | Resolved,
    actor_id: int,
    stop_event: Any,
    report_queue: Any = None,
    max_batches: int = 0,
    standalone: bool = False,
    generation: int = -1,
    ack: Any = None,
) -> dict:
    """Process entry: collect and send until ``stop_event`` (or ``max_batches`` sent); returns the report (also queued).
    ``actor_id`` < 0 leases a slot; ``ack`` is set once the stop is seen; ``standalone`` (launch/actor.py) stops on SIGINT."""
    run = cfg if isinstance(cfg, Resolved) else resolve_run(cfg, device="cpu")
    terminate = []
    signal.signal(signal.SIGINT, (lambda *_: terminate.append(True)) if standalone else signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: terminate.append(True))
    orphaned = (lambda: False) if standalone else orphan_check()  # re-parented: the launcher died
    should_stop = lambda: stop_event.is_set() or bool(terminate) or orphaned()  # noqa: E731
    torch.set_num_threads(1)
    if run.cfg.actor.precision == "bf16" and not cpu_has_native_bf16():
        print(
            "[ACTOR] warning: actor.precision bf16 on a CPU without native bf16 (AVX512-BF16/AMX) is slower than fp32 here",
            flush=True,
        )
    if run.cfg.actor.nice:
        os.nice(run.cfg.actor.nice)
    incarnation = int.from_bytes(os.urandom(8), "little") >> 1
    leased = actor_id < 0
    # the liveness file is a standalone actor's (launch.actor); a launcher's actors inherit its path, not its file
    heartbeat = Heartbeat("actor", path=None if standalone else "")
    while True:
        check_every = 0.0
        if leased:
            lease = lease_slot(
                run.cfg.transport,
                incarnation,
                run.cfg.actor.envs_per_actor,
                wait=run.cfg.actor.slot_wait,
                should_stop=should_stop,
                echo=lambda line: print(line, flush=True),
            )
            if lease is None or lease["slot"] < 0:
                refused, skew = (lease["reason"], lease.get("version_skew", "")) if lease else ("stopped", "")
                report = dict(actor=-1, incarnation=incarnation, batches=0, refused=refused, version_skew=skew)
                break
            actor_id, check_every = lease["slot"], lease["lease"] / 2
            run = dataclasses.replace(run, cfg=dataclasses.replace(run.cfg, actors=lease["slots"]))
            print(
                f"[ACTOR] slot {actor_id} of {lease['slots']} (lease {lease['lease']:g} s), incarnation {incarnation:#x}",
                flush=True,
            )
        report = _play(run, actor_id, incarnation, generation, should_stop, max_batches, ack, check_every, heartbeat)
        if not report.get("overtaken") or should_stop():
            break
        print(f"[ACTOR] slot {actor_id} was taken by another actor's data before this one's landed; asking again", flush=True)
    if report_queue is not None:
        report_queue.put(report)
    return report


class LeaseKeeper:
    """A leased slot's renewals: every ``check_every`` s (0: a fixed slot, never), between batches and while a held
    sender waits; ``renew_if_due()`` is False once the learner has given the slot to another actor."""

    def __init__(self, run: Resolved, incarnation: int, slot: int, should_stop: Callable[[], bool], check_every: float):
        self.run, self.incarnation, self.slot, self.should_stop = run, incarnation, slot, should_stop
        self.check_every, self.checked, self.held = check_every, time.perf_counter(), True

    def renew_if_due(self) -> bool:
        if self.held and self.check_every and time.perf_counter() - self.checked >= self.check_every:
            self.held = _holds(self.run, self.incarnation, self.slot, self.should_stop)
            self.checked = time.perf_counter()
        return self.held


def _holds(run: Resolved, incarnation: int, slot: int, should_stop: Callable[[], bool]) -> bool:
    """Whether the learner still gives ``slot`` to this incarnation (no answer in 2 s: taken as yes, keep sending)."""
    cfg = run.cfg
    reply = lease_slot(
        cfg.transport, incarnation, cfg.actor.envs_per_actor, want=slot, wait=2.0, should_stop=should_stop, echo=lambda _: None
    )
    return reply is None or reply["slot"] == slot or reply["reason"].startswith("no answer")


def _play(
    run: Resolved,
    actor_id: int,
    incarnation: int,
    generation: int,
    should_stop: Callable[[], bool],
    max_batches: int,
    ack: Any,
    check_every: float,
    heartbeat: Heartbeat,
) -> dict:
    """Collect on slot ``actor_id`` until a stop, ``max_batches``, another protocol, or the leased slot taken (``overtaken``)."""
    cfg = run.cfg
    collector = Collector(run, actor_id, incarnation, generation)
    lease = LeaseKeeper(run, incarnation, actor_id, should_stop, check_every)

    def waiting() -> None:  # a held sender may wait longer than the lease: the lease is renewed meanwhile
        heartbeat.beat()
        lease.renew_if_due()

    sender = BatchSender(
        f"tcp://{cfg.transport.host}:{cfg.transport.base_port + actor_id}",  # this slot's experience socket
        actor_id,
        incarnation,
        cfg.actor.max_staged_batches,
        cfg.actor.send_hwm,
        transport=cfg.transport,
        wait_when_full=cfg.learner.holds_ratio,
        should_stop=should_stop,
        on_wait=waiting,
        kernel_buffer=held_kernel_buffer(collector.spec, cfg.actor.envs_per_actor, cfg.actor.batch_steps),
    )
    weights = WeightClient(cfg.transport, actor_id, incarnation, collector.net)
    if cfg.actor.weights_timeout > 0:  # the learner's current weights before the first action
        current = weights.fetch(have=-1, timeout=cfg.actor.weights_timeout, should_stop=should_stop)
        if current is not None:
            collector.load_weights(*current, weights.run, weights.env_steps)

    def refresh(have: int) -> tuple[int, dict, int, int] | None:  # newer weights, with their run and its env steps
        got = weights.poll(have)
        return None if got is None else (*got, weights.run, weights.env_steps)

    seq, overtaken = 0, False
    started = time.perf_counter()
    while not should_stop() and (max_batches <= 0 or seq < max_batches):
        batch = collector.collect(cfg.actor.batch_steps, seq, refresh)
        sender.submit(batch, collector.stats)
        heartbeat.beat()
        seq += 1
        if weights.version_rejects >= VERSION_REJECTS_TO_EXIT:  # a learner of another release: playing on is waste
            print(f"[ACTOR] the learner's weights are of another protocol ({weights.version_skew}); exiting", flush=True)
            break
        if not lease.renew_if_due():
            overtaken = True
            break
    if ack is not None and not overtaken:
        ack.set()
    run_seconds = time.perf_counter() - started
    sender.close(collector.stats, timeout=0.0 if overtaken else 5.0)
    weights.close()
    collector.close()
    sent = ("sent_batches", "sent_transitions", "dropped_batches", "submit_seconds", "wait_seconds")
    report: dict[str, Any] = dict(actor=actor_id, incarnation=incarnation, batches=seq, **{k: getattr(sender, k) for k in sent})
    steps, episodes = int(collector.stats["steps"]), int(collector.stats["episodes"])
    report |= dict(run_seconds=run_seconds, env_seconds=collector.env_seconds, steps=steps, episodes=episodes)
    report |= {k: getattr(collector, k) for k in ("weights_version", "weights_run", "first_action_weights_version")}
    skew = weights.version_skew if weights.version_rejects >= VERSION_REJECTS_TO_EXIT else ""
    return report | dict(version_skew=skew, overtaken=overtaken)
