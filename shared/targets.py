"""TD targets: what Q(s, a) is regressed on, one rule object per TD rule (Acme's one loss per rule).

A rule (:class:`TDRule`) names the forward passes it needs besides the online net at s (``needs``) and turns a batch
and their fp32 Q-values into the target [B], so the learner never branches on the rule. Inputs: the scaled n-step
return ``reward`` [B], ``discount`` [B] (gamma^L, 0 after a terminal); masks bool [B, A] (True = valid) or None.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from shared.network import masked_argmax

MUNCHAUSEN_LOG_FLOOR = -1.0
"""Munchausen-DQN's l0: the bonus tau * log pi(a|s) is clipped to [l0, 0] (the paper's -1)."""

Tensors = dict[str, torch.Tensor]
"""A batch's tensors, or the rule's passes (below), by name."""

ONLINE_NEXT, TARGET_NEXT, TARGET_HERE = "online(s')", "target(s')", "target(s)"
"""The forward passes a rule may need: the online net at s', the target net at s' and at s."""


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
    """Double DQN (van Hasselt et al. 2016): ``r + discount * Q_target(s', argmax_a' Q_online(s', a'))``, a' valid."""
    return reward + discount * double_q_bootstrap(next_online_q, next_target_q, next_mask)


def log_policy(q: torch.Tensor, valid: torch.Tensor | None, tau: float) -> torch.Tensor:
    """log softmax(q / tau) over the last axis, invalid actions (``valid`` False) at -inf."""
    if valid is not None:
        q = q.masked_fill(~valid.bool(), float("-inf"))
    return torch.log_softmax(q / tau, dim=-1)


def munchausen_terms(
    target_q: torch.Tensor,
    action: torch.Tensor,
    mask: torch.Tensor | None,
    next_target_q: torch.Tensor,
    next_mask: torch.Tensor | None,
    tau: float,
    log_floor: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Munchausen-DQN's two terms (Vieillard et al. 2020): the bonus ``clamp(tau * log pi(a|s), log_floor, 0)`` [B] and
    the soft value at s' (:func:`soft_value`), pi = softmax(Q_target / tau) over the valid actions."""
    bonus = (tau * log_policy(target_q, mask, tau).gather(1, action).squeeze(1)).clamp(min=log_floor, max=0.0)
    return bonus, soft_value(next_target_q, next_mask, tau)


def soft_value(q: torch.Tensor, mask: torch.Tensor | None, tau: float) -> torch.Tensor:
    """``sum_a pi(a|s) (Q(s, a) - tau * log pi(a|s))`` [B], pi = softmax(Q / tau) over the valid actions."""
    log_pi = log_policy(q, mask, tau)
    soft = log_pi.exp() * (q - tau * log_pi)
    if mask is not None:  # invalid actions: probability 0 and log -inf, whose product is NaN, not 0
        soft = torch.where(mask.bool(), soft, 0.0)
    return soft.sum(dim=1)


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


@dataclass(frozen=True)
class TDRule:
    """A TD rule: the forward passes it needs (``needs``) and its target. Subclasses hold their constants."""

    name = "td"
    needs: frozenset[str] = frozenset()

    def target(self, batch: Tensors, reward: torch.Tensor, q: Tensors) -> torch.Tensor:
        """The target [B] from the batch, ``reward`` and the passes ``q``."""
        raise NotImplementedError

    def describe(self) -> str:
        """The rule in a few words, for a run's header."""
        return "Double-DQN bootstrap"

    # ``target`` in numpy for the actors' initial priorities (shared/priorities.py), from the actor's own Q.
    def np_value(self, next_q: np.ndarray) -> np.ndarray:
        """The value of s' [...] from its Q [..., A] (-inf: invalid): the max (one net stands in for Double DQN's two)."""
        return next_q.max(-1)

    def np_first_term(self, q: np.ndarray, action: np.ndarray) -> np.ndarray:
        """The term the window's first step adds at Q [..., A] and action [...]: 0 (Munchausen: its bonus)."""
        return np.zeros(action.shape)


@dataclass(frozen=True)
class DoubleDQN(TDRule):
    """Double DQN (:func:`double_dqn`): the target net's value at the online net's argmax at s'."""

    name = "double"
    needs: frozenset[str] = frozenset({ONLINE_NEXT, TARGET_NEXT})

    def target(self, batch: Tensors, reward: torch.Tensor, q: Tensors) -> torch.Tensor:
        return double_dqn(reward, batch["discount"], q[ONLINE_NEXT], q[TARGET_NEXT], batch.get("next_mask"))


@dataclass(frozen=True)
class Munchausen(TDRule):
    """Munchausen-DQN (:func:`munchausen`): the bonus at the window's first step."""

    name = "munchausen"
    needs: frozenset[str] = frozenset({TARGET_HERE, TARGET_NEXT})
    alpha: float = 0.9
    tau: float = 0.03

    def target(self, batch: Tensors, reward: torch.Tensor, q: Tensors) -> torch.Tensor:
        action = batch["action"].unsqueeze(1)
        return munchausen(
            reward, batch["discount"], action, q[TARGET_HERE], batch.get("mask"), q[TARGET_NEXT], batch.get("next_mask"),
            self.alpha, self.tau,
        )  # fmt: skip

    def describe(self) -> str:
        return f"Munchausen target (alpha {self.alpha:g}, tau {self.tau:g})"

    def np_value(self, next_q: np.ndarray) -> np.ndarray:
        log_pi = _np_log_policy(next_q, self.tau)
        return np.where(np.isfinite(next_q), np.exp(log_pi) * (next_q - self.tau * log_pi), 0.0).sum(-1)

    def np_first_term(self, q: np.ndarray, action: np.ndarray) -> np.ndarray:
        log_pi = np.take_along_axis(_np_log_policy(q, self.tau), action[..., None], -1)[..., 0]
        return self.alpha * np.clip(self.tau * log_pi, MUNCHAUSEN_LOG_FLOOR, 0.0)


def _np_log_policy(q: np.ndarray, tau: float) -> np.ndarray:
    """log softmax(q / tau) over the last axis; -inf entries (invalid actions) stay -inf."""
    z = q / tau
    z = z - z.max(-1, keepdims=True)
    with np.errstate(divide="ignore"):
        return z - np.log(np.exp(z).sum(-1, keepdims=True))


RULES: dict[str, type[TDRule]] = {rule.name: rule for rule in (DoubleDQN, Munchausen)}
"""The TD rules by name, the words of ``--learner.rule``."""


def build_rule(name: str, alpha: float, tau: float) -> TDRule:
    """The rule named ``name`` (:data:`RULES`; a resolved learner.rule), Munchausen's with its ``alpha`` and ``tau``."""
    return Munchausen(alpha=alpha, tau=tau) if RULES[name] is Munchausen else RULES[name]()
