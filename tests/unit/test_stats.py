"""launch.tools.stats against figures worked by hand: t intervals, paired differences, minimum detectable effects.

Quantiles of Student's t used below (any table): t_{0.975,2} = 4.302653, t_{0.975,3} = 3.182446,
t_{0.975,4} = 2.776445, t_{0.8,3} = 0.978472, t_{0.8,4} = 0.940965.
"""

import math

import numpy as np
import pytest

from launch.tools.stats import mde_paired, mde_two_groups, paired, pooled_sd, t_interval


def test_t_interval_of_four_runs():
    # mean 2.5; SD sqrt((1.5^2 + 0.5^2 + 0.5^2 + 1.5^2) / 3) = sqrt(5/3) = 1.290994; SE = 1.290994 / 2 = 0.645497;
    # half-width t_{0.975,3} x SE = 3.182446 x 0.645497 = 2.054260
    mean, lo, hi = t_interval([1, 2, 3, 4])
    assert mean == 2.5
    assert lo == pytest.approx(2.5 - 2.054260, abs=1e-5) and hi == pytest.approx(2.5 + 2.054260, abs=1e-5)
    # at 90%: t_{0.95,3} = 2.353363, half-width 2.353363 x 0.645497 = 1.519089
    assert t_interval([1, 2, 3, 4], 0.90)[1] == pytest.approx(2.5 - 1.519089, abs=1e-5)


def test_t_interval_of_one_run_and_of_runs_alike():
    assert t_interval([7.0]) == (7.0, None, None)  # one run: no spread between runs to measure
    assert t_interval(np.array([3.0, 3.0, 3.0])) == (3.0, 3.0, 3.0)
    with pytest.raises(ValueError):
        t_interval([])


def test_the_t_interval_covers_as_claimed_where_the_range_of_three_runs_does_not():
    """3 normal runs, 2,000 times: the t interval holds the true mean about 95% of the time; the range of the three
    (what a percentile bootstrap over 3 points gives, near enough) 1 - 2 x (1/2)^3 = 75% of the time."""
    draws = np.random.default_rng(0).normal(10.0, 2.0, size=(2000, 3))
    t_hits = np.mean([lo <= 10.0 <= hi for _, lo, hi in map(t_interval, draws)])
    range_hits = np.mean((draws.min(axis=1) <= 10.0) & (10.0 <= draws.max(axis=1)))
    assert 0.93 <= t_hits <= 0.97  # binomial SD at 2,000 draws: 0.5 points
    assert 0.72 <= range_hits <= 0.78


def test_paired_differences_over_the_common_seeds():
    a = {1: 10.0, 2: 12.0, 3: 9.0, 4: 7.0}
    b = {1: 8.0, 2: 12.0, 3: 5.0, 5: 1.0}
    p = paired(a, b)
    # seeds 1, 2, 3: differences 2, 0, 4; mean 2; SD sqrt((0 + 4 + 4) / 2) = 2; SE 2 / sqrt(3) = 1.154701;
    # half-width t_{0.975,2} x SE = 4.302653 x 1.154701 = 4.968276
    assert (p.seeds, p.a, p.b, p.diffs, p.n) == ([1, 2, 3], [10.0, 12.0, 9.0], [8.0, 12.0, 5.0], [2.0, 0.0, 4.0], 3)
    assert p.mean == 2.0 and p.sd == pytest.approx(2.0) and p.se == pytest.approx(1.154701, abs=1e-6)
    assert p.ci == pytest.approx([2 - 4.968276, 2 + 4.968276], abs=1e-5)
    assert (p.positive, p.negative, p.ties) == (2, 0, 1)  # the tie counted apart
    assert (p.only_a, p.only_b) == ([4], [5])


def test_paired_with_one_or_no_common_seed():
    one = paired({1: 3.0}, {1: 5.0, 2: 1.0})
    assert (one.mean, one.ci, one.sd, one.se, one.negative) == (-2.0, None, None, None, 1)
    none = paired({1: 3.0}, {2: 1.0})
    assert (none.n, none.mean, none.ci, none.positive) == (0, None, None, 0)


def test_minimum_detectable_effects():
    # paired, SD of differences 2 over 4 seeds: (t_{0.975,3} + t_{0.8,3}) x 2 / sqrt(4) = 4.160918
    assert mde_paired(2.0, 4) == pytest.approx(4.160918, abs=1e-5)
    assert mde_paired(2.0, 1) is None  # no degree of freedom
    # two groups of 3, pooled SD 10: df 4, SE 10 x sqrt(1/3 + 1/3) = 8.164966; (2.776445 + 0.940965) x 8.164966 = 30.3525
    assert mde_two_groups(10.0, 3, 3) == pytest.approx(30.3525, abs=1e-3)
    # 3 vs 2: df 3, SE 10 x sqrt(1/3 + 1/2) = 9.128709; (3.182446 + 0.978472) x 9.128709 = 37.9839
    assert mde_two_groups(10.0, 3, 2) == pytest.approx(37.9839, abs=1e-3)
    assert mde_two_groups(10.0, 1, 1) is None
    # more power, a larger effect: at 90%, t_{0.9,4} = 1.533206
    assert mde_two_groups(10.0, 3, 3, power=0.9) == pytest.approx((2.776445 + 1.533206) * 10 * math.sqrt(2 / 3), abs=1e-3)


def test_pooled_sd():
    # [1, 2, 3]: variance 1 on 2 df; [10, 14]: variance 8 on 1 df; [7]: nothing. sqrt((2 x 1 + 1 x 8) / 3) = 1.825742
    assert pooled_sd([[1, 2, 3], [10, 14], [7]]) == pytest.approx(1.825742, abs=1e-6)
    assert pooled_sd([[5.0], []]) is None
