"""Initial replay priorities an actor computes for its own batch (Ape-X), with the replay's n-step rule and the
learner's TD rule (shared/targets.py).

The n-step return R follows learner/replay/frame_ring.py, also stopping at the batch's end (later rewards are not known
yet). With L steps added the priority is

    | reward_scale * R + first(t) + gamma**L * V(s_{t+L}) * (not terminated) - Q(s_t, a_t) |

with the actor's own Q and the rule's numpy parts (:class:`shared.targets.TDRule`): V its bootstrap value and
``first`` the term the window's first step adds (Munchausen's bonus). L = 0 (a truncation slot, never sampled): 0.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from shared.targets import DoubleDQN, TDRule


def n_step_priorities(
    q: np.ndarray,
    actions: np.ndarray,
    rewards: np.ndarray,
    terminated: np.ndarray,
    first: np.ndarray,
    next_first: np.ndarray,
    n_step: int,
    gamma: float,
    reward_scale: float,
    masks: np.ndarray | None = None,
    rule: TDRule | None = None,
) -> np.ndarray:
    """|n-step TD errors| float32 [E, T] from ``q`` [E, T+1, A] (each slot's observation, then the one after the batch),
    actions, rewards (game units), terminated and first [E, T], ``next_first`` [E] (the observation after the batch starts
    an episode), ``masks`` [E, T+1, A] or None (bootstrap over valid actions only) and ``rule`` (None: Double DQN's)."""
    E, T = rewards.shape
    n = int(n_step)
    term = terminated.astype(bool)
    first_after = np.concatenate([first[:, 1:].astype(bool), np.asarray(next_first, bool).reshape(E, 1)], 1)
    ok = term | ~first_after  # the step from slot j has a successor or terminates
    go_on = ok & ~term  # the return continues after step j
    pad = ((0, 0), (0, n))
    ok_w = sliding_window_view(np.pad(ok, pad), n, axis=1)[:, :T]  # [E, T, n]; False past the batch
    go_w = sliding_window_view(np.pad(go_on, pad), n, axis=1)[:, :T]
    term_w = sliding_window_view(np.pad(term, pad), n, axis=1)[:, :T]
    rew_w = sliding_window_view(np.pad(rewards.astype(np.float64), pad), n, axis=1)[:, :T]
    before = np.concatenate([np.ones((E, T, 1), bool), go_w[..., :-1]], 2)
    include = ok_w & np.logical_and.accumulate(before, axis=2)
    steps = include.sum(2)  # L
    powers = gamma ** np.arange(n + 1, dtype=np.float64)
    ret = (rew_w * include * powers[:n]).sum(2)
    done = (include & term_w).any(2)
    rows = np.arange(E)[:, None]
    boot_q = q[rows, np.arange(T)[None, :] + steps].astype(np.float64)
    if masks is not None:
        boot_q = np.where(masks[rows, np.arange(T)[None, :] + steps], boot_q, -np.inf)
    taken = q[rows, np.arange(T)[None, :], actions.astype(np.int64)].astype(np.float64)
    rule = rule if rule is not None else DoubleDQN()
    boot = rule.np_value(boot_q)
    here = q[:, :T].astype(np.float64)
    if masks is not None:
        here = np.where(masks[:, :T], here, -np.inf)
    at_first = rule.np_first_term(here, actions.astype(np.int64))
    target = reward_scale * ret + at_first + np.where(done, 0.0, powers[steps] * boot)
    return np.where(steps > 0, np.abs(target - taken), 0.0).astype(np.float32)
