"""TD targets, one rule per function: what Q(s, a) is regressed on.

Each rule takes the n-step return ``reward`` [B] (already scaled), the ``discount`` [B] (gamma^n, 0 where the window
ended in a terminal) and the networks' fp32 Q-values it needs, and returns the target [B]. The learner computes the
forward passes (learner/trainer.py: which nets see which observations is the part that differs per rule, listed in
:data:`NEEDS`) and picks the rule by name (:data:`RULES`); the actors' initial priorities (shared/priorities.py) use
the same rule in numpy. Masks are bool [B, A], True = valid, or None (every action valid).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from shared.network import masked_argmax

MUNCHAUSEN_LOG_FLOOR = -1.0
"""Munchausen-DQN's l0: the bonus tau * log pi(a|s) is clipped to [l0, 0] (the paper's -1)."""


def double_q_bootstrap(online_q: torch.Tensor, target_q: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Double-DQN bootstrap value at s', [B]: the target net's Q at the online net's best valid action."""
    return target_q.gather(1, masked_argmax(online_q, mask)).squeeze(1)


def double_dqn(
    reward: torch.Tensor,
    discount: torch.Tensor,
    next_online_q: torch.Tensor,
    next_target_q: torch.Tensor,
    next_mask: torch.Tensor | None,
) -> torch.Tensor:
    """Double DQN (van Hasselt et al. 2016): ``r + discount * Q_target(s', argmax_a' Q_online(s', a'))``, the argmax
    over the valid actions of s'."""
    return reward + discount * double_q_bootstrap(next_online_q, next_target_q, next_mask)


def munchausen_terms(
    target_q: torch.Tensor,
    action: torch.Tensor,
    mask: torch.Tensor | None,
    next_target_q: torch.Tensor,
    next_mask: torch.Tensor | None,
    tau: float,
    log_floor: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Munchausen-DQN's two terms (Vieillard et al. 2020), each [B]: the bonus ``clamp(tau * log pi(a|s),
    log_floor, 0)`` and the soft value at s' ``sum_a' pi(a'|s') (Q(s', a') - tau * log pi(a'|s'))``, where
    ``pi = softmax(Q_target / tau)`` over the valid actions. ``target_q``/``next_target_q`` are the target net's
    Q [B, A] at s and s', ``action`` long [B, 1]."""

    def log_policy(q: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
        if valid is not None:
            q = q.masked_fill(~valid.bool(), float("-inf"))
        return torch.log_softmax(q / tau, dim=1)

    bonus = (tau * log_policy(target_q, mask).gather(1, action).squeeze(1)).clamp(min=log_floor, max=0.0)
    log_pi = log_policy(next_target_q, next_mask)
    soft = log_pi.exp() * (next_target_q - tau * log_pi)
    if next_mask is not None:  # invalid actions: probability 0 and log -inf, whose product is NaN, not 0
        soft = torch.where(next_mask.bool(), soft, 0.0)
    return bonus, soft.sum(dim=1)


def munchausen(
    reward: torch.Tensor,
    discount: torch.Tensor,
    action: torch.Tensor,
    target_q: torch.Tensor,
    mask: torch.Tensor | None,
    next_target_q: torch.Tensor,
    next_mask: torch.Tensor | None,
    alpha: float,
    tau: float,
    log_floor: float = MUNCHAUSEN_LOG_FLOOR,
) -> torch.Tensor:
    """Munchausen-DQN: ``r + alpha * clamp(tau * log pi(a|s), l0, 0) + discount * soft value at s'``, both terms
    from the target net (:func:`munchausen_terms`); no online argmax."""
    bonus, soft = munchausen_terms(target_q, action, mask, next_target_q, next_mask, tau, log_floor)
    return reward + alpha * bonus + discount * soft


RULES: dict[str, Callable[..., torch.Tensor]] = {"double_dqn": double_dqn, "munchausen": munchausen}
"""The TD rules by name (``learner.munchausen_alpha`` above 0 picks ``munchausen``)."""

NEEDS = {"double_dqn": frozenset({"online(s')", "target(s')"}), "munchausen": frozenset({"target(s)", "target(s')"})}
"""The forward passes each rule's target needs besides the online net at s (the Q(s, a) being fitted)."""


def rule_name(munchausen_alpha: float) -> str:
    """The rule a learner config picks: Munchausen's where its alpha is above 0, else Double DQN's."""
    return "munchausen" if munchausen_alpha > 0 else "double_dqn"
