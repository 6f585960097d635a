"""The TD rules of shared/targets.py, each against a reference computed by hand."""

import math

import numpy as np
import pytest
import torch

from shared.targets import (
    RULES,
    TARGET_HERE,
    TARGET_NEXT,
    DoubleDQN,
    Munchausen,
    build_rule,
    double_dqn,
    double_q_bootstrap,
    munchausen,
    munchausen_terms,
)


def test_double_dqn_target_by_hand():
    # row 0: the online argmax at s' among the valid actions {0, 1} is 1 (5 > 1), the target net's Q there is 20:
    # 1 + 0.9 * 20 = 19. Row 1: terminal (discount 0): the reward alone, 2.
    reward, discount = torch.tensor([1.0, 2.0]), torch.tensor([0.9, 0.0])
    next_online = torch.tensor([[1.0, 5.0, 9.0], [3.0, 2.0, 1.0]])
    next_target = torch.tensor([[10.0, 20.0, 30.0], [40.0, 50.0, 60.0]])
    next_mask = torch.tensor([[True, True, False], [True, True, True]])
    torch.testing.assert_close(double_dqn(reward, discount, next_online, next_target, next_mask), torch.tensor([19.0, 2.0]))
    # without the mask the argmax of row 0 is the third action: 1 + 0.9 * 30 = 28
    torch.testing.assert_close(double_dqn(reward, discount, next_online, next_target, None), torch.tensor([28.0, 2.0]))


def test_munchausen_target_by_hand():
    # tau 1, alpha 0.9. At s the target net's Q (0, ln 3) gives pi = (1/4, 3/4); the action taken is 0:
    # tau * log pi = ln(1/4) = -1.386, clipped to -1, so the bonus is 0.9 * -1 = -0.9. At s' the same Q: the soft
    # value sum pi (q - log pi) = 1/4 * ln 4 + 3/4 * (ln 3 - ln 3/4) = ln 4. Reward 1, discount 0.9:
    # 1 - 0.9 + 0.9 * ln 4 = 1.34766.
    q = torch.tensor([[0.0, math.log(3.0)]])
    got = munchausen(torch.tensor([1.0]), torch.tensor([0.9]), torch.tensor([[0]]), q, None, q, None, alpha=0.9, tau=1.0)
    torch.testing.assert_close(got, torch.tensor([1.0 - 0.9 + 0.9 * math.log(4.0)]))
    # the action pi likes (3/4): tau * log pi = ln 3/4 = -0.2877, not clipped
    got = munchausen(torch.tensor([1.0]), torch.tensor([0.0]), torch.tensor([[1]]), q, None, q, None, alpha=0.9, tau=1.0)
    torch.testing.assert_close(got, torch.tensor([1.0 + 0.9 * math.log(0.75)]))


def test_the_config_builds_the_rule_it_names_and_the_rule_says_which_passes_it_needs():
    double = build_rule("double", 0.9, 0.03)  # Munchausen's constants do not make Double DQN Munchausen
    assert type(double) is DoubleDQN and double.name == "double"
    assert double.needs == {"online(s')", "target(s')"}  # the online argmax, the target's value
    rule = build_rule("munchausen", 0.5, 0.1)
    assert type(rule) is Munchausen and rule.name == "munchausen" and (rule.alpha, rule.tau) == (0.5, 0.1)
    assert rule.needs == {"target(s)", "target(s')"}  # no online argmax
    with pytest.raises(KeyError, match="double_dqn"):
        build_rule("double_dqn", 0.0, 0.03)  # the old name of Double DQN's rule is no option's word


def test_the_rules_names_are_the_words_of_learner_rule():
    from typing import get_args, get_type_hints

    from shared.config import LearnerConfig

    assert RULES == {"double": DoubleDQN, "munchausen": Munchausen}
    assert all(rule.name == name for name, rule in RULES.items())
    assert set(get_args(get_type_hints(LearnerConfig)["rule"])) == {"auto", *RULES}  # what --learner.rule accepts


def test_double_q_bootstrap_gathers_the_target_at_the_online_argmax():
    online = torch.tensor([[1.0, 5.0, 3.0], [-2e9, 0.0, -3e9]])
    target = torch.tensor([[10.0, 20.0, 30.0], [40.0, 50.0, 60.0]])
    mask = torch.tensor([[True, False, True], [True, False, True]])
    torch.testing.assert_close(double_q_bootstrap(online, target, mask), torch.tensor([30.0, 40.0]))
    torch.testing.assert_close(double_q_bootstrap(online, target), torch.tensor([20.0, 50.0]))


def test_munchausen_terms_clip_the_log_policy_bonus_and_soft_value_the_valid_actions():
    # tau 1: pi at s is uniform over 2 actions (log 1/2), over 4 (log 1/4, clipped to -1); at s' the soft value is
    # sum pi (q - log pi) = 1 + log 2 for q' = (1, 1), and the invalid third action (Q 100) takes no part
    here = torch.tensor([[0.0, 0.0, -1e4, -1e4], [0.0, 0.0, 0.0, 0.0]])
    mask_here = torch.tensor([[True, True, False, False], [True, True, True, True]])
    action = torch.tensor([[1], [3]])
    nxt = torch.tensor([[1.0, 1.0, 100.0], [1.0, 1.0, 100.0]])
    nxt_mask = torch.tensor([[True, True, False], [True, True, False]])
    bonus, soft = munchausen_terms(here, action, mask_here, nxt, nxt_mask, tau=1.0, log_floor=-1.0)
    log2 = torch.log(torch.tensor(2.0))
    torch.testing.assert_close(bonus, torch.stack([-log2, torch.tensor(-1.0)]))
    torch.testing.assert_close(soft, torch.full((2,), 1.0) + log2)
    assert torch.isfinite(soft).all()


def test_munchausen_soft_value_is_tau_logsumexp():
    """sum_a pi(a) (q(a) - tau log pi(a)) with pi = softmax(q / tau) equals tau * logsumexp(q / tau)."""
    g = torch.Generator().manual_seed(3)
    q_here, q_next = torch.randn(6, 5, generator=g), torch.randn(6, 5, generator=g)
    action = torch.randint(0, 5, (6, 1), generator=g)
    for tau in (0.03, 0.5):
        bonus, soft = munchausen_terms(q_here, action, None, q_next, None, tau=tau, log_floor=-1.0)
        torch.testing.assert_close(soft, tau * torch.logsumexp(q_next / tau, dim=1))
        want = (tau * torch.log_softmax(q_here / tau, dim=1).gather(1, action).squeeze(1)).clamp(-1.0, 0.0)
        torch.testing.assert_close(bonus, want)
        assert (bonus <= 0).all() and (bonus >= -1).all()


def test_munchausen_through_a_three_step_window_by_hand():
    """The chosen rule on a 3-step window, from the replay's own sample: the 3-step return, the bonus of the first
    step's action only, and gamma^3 times the soft value at s3 (the rule issue 64's Tier 1 kept; docs/architecture.md)."""
    from learner.replay.frame_ring import FrameReplay

    gamma, T = 0.9, 6
    replay = FrameReplay(1, 16, frame_shape=(2, 2), stack=1, n_step=3, gamma=gamma)
    frames = np.arange(T * 4, dtype=np.uint8).reshape(1, T, 2, 2)
    actions = np.array([[0, 1, 1, 0, 1, 0]], dtype=np.uint8)
    rewards = np.array([[1.0, 2.0, 4.0, 8.0, 16.0, 32.0]], dtype=np.float32)
    first = np.zeros((1, T), dtype=bool)
    first[0, 0] = True
    replay.add(0, frames, actions, rewards, np.zeros((1, T), dtype=bool), first)
    batch = replay.sample(64, generator=torch.Generator().manual_seed(0))
    rows = (batch["slot"] == 0).nonzero().flatten()
    assert len(rows) > 0
    batch = {key: value[rows[:1]] for key, value in batch.items()}
    # slot 0: r0 + gamma r1 + gamma^2 r2 = 1 + 1.8 + 3.24 = 6.04, discount gamma^3 = 0.729, s' = s3 (frame 3), action 0
    assert batch["reward"].item() == pytest.approx(6.04)
    assert batch["discount"].item() == pytest.approx(0.729)
    assert int(batch["action"]) == 0
    np.testing.assert_array_equal(batch["next_obs"][0].numpy().reshape(2, 2), frames[0, 3])
    # tau 1, alpha 0.9; the target net's Q (0, ln 3) at s0 and at s3: pi = (1/4, 3/4). Action 0: tau log pi = ln 1/4,
    # clipped to -1, so the bonus is -0.9; the soft value at s3 is ln 4 (test_munchausen_target_by_hand). The steps
    # inside the window (slots 1 and 2) add no bonus: 6.04 - 0.9 + 0.729 ln 4 = 6.15062.
    q = torch.tensor([[0.0, math.log(3.0)]])
    rule = build_rule("munchausen", 0.9, 1.0)
    got = rule.target(batch, batch["reward"], {TARGET_HERE: q, TARGET_NEXT: q})
    torch.testing.assert_close(got, torch.tensor([6.04 - 0.9 + 0.729 * math.log(4.0)]))
    assert got.item() == pytest.approx(6.150616, abs=1e-5)
    # the actors' first priorities add the same first-step term
    assert rule.np_first_term(q.numpy(), np.array([0]))[0] == pytest.approx(-0.9)
