"""The evaluation actor (Ape-X's evaluator): plays the learner's current weights while training goes on.

Runs in its own process beside the collectors: each request on ``requests`` (its counters and the learner's last
published weights) is played for ``eval.episodes`` episodes and put back on ``results`` with the summary, a random
policy's on the same seeds, and the weights played. The weights come with the request, so it needs no socket.
"""

from __future__ import annotations

import queue
import signal
import time
from typing import Any

import torch

from shared.config import RunConfig
from shared.envs import action_names, entry_for, env_label, with_stage
from shared.evaluation.episodes import build_network, play_episodes, summarize
from shared.orphans import orphan_check
from shared.seeding import EVAL_ROUND, stream_seed


def eval_process_main(cfg: RunConfig, stop_event: Any, requests: Any, results: Any) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    terminate: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: terminate.append(True))
    orphaned = orphan_check()
    torch.set_num_threads(1)  # not niced like the collectors: an evaluation must report on schedule
    env_cfg = with_stage(cfg.env, cfg.eval.stage)
    reference = entry_for(env_cfg).random_reference
    net = build_network(env_cfg, net_cfg=cfg.net)
    names = action_names(env_cfg)
    rounds = 0
    results.cancel_join_thread()  # a result (with its weights) the launcher never read must not hold up our exit
    stopping = lambda: stop_event.is_set() or bool(terminate) or orphaned()  # noqa: E731
    while not stopping():
        try:
            request = requests.get(timeout=0.5)
        except queue.Empty:
            continue
        got = request.pop("weights")
        if got is None:
            continue
        version, arrays = got
        net.load_state_dict({name: torch.from_numpy(a) for name, a in arrays.items()})
        start = time.perf_counter()
        seed = stream_seed(cfg.eval.seed, EVAL_ROUND, rounds)  # a stream of its own per round (shared/seeding.py)
        episodes = play_episodes(net, env_cfg, cfg.eval.episodes, cfg.eval.epsilon, seed)
        baseline = None
        if reference:  # the random policy on the same seeds, to read the score against
            baseline = summarize(play_episodes(None, env_cfg, cfg.eval.episodes, 1.0, seed, policy="random"), len(names), names)
            baseline.pop("action_counts"), baseline.pop("action_fractions")
        rounds += 1
        results.put(
            dict(
                request,
                weights_version=version,
                epsilon=cfg.eval.epsilon,
                stage=env_label(env_cfg),
                seconds=time.perf_counter() - start,
                env=env_cfg.name,
                random=baseline,
                summary=summarize(episodes, len(names), names),
                state=arrays,
            )
        )
