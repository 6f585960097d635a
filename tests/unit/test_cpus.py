"""The CPUs a process may use (shared/cpus.py): its affinity capped by a cgroup quota, v2 and v1, rounded up."""

import os

from shared.cpus import cgroup_quota, usable_cpus


def test_a_cgroup_quota_caps_the_affinity_rounded_up(tmp_path):
    cores = len(os.sched_getaffinity(0))
    (tmp_path / "cpu.max").write_text("150000 100000\n")  # v2: --cpus 1.5
    assert cgroup_quota(str(tmp_path)) == 1.5
    assert usable_cpus(str(tmp_path)) == min(cores, 2)
    (tmp_path / "cpu.max").write_text("50000 100000\n")  # half a core: still one worker
    assert usable_cpus(str(tmp_path)) == 1
    (tmp_path / "cpu.max").write_text("max 100000\n")  # no quota: the affinity
    assert cgroup_quota(str(tmp_path)) == 0.0 and usable_cpus(str(tmp_path)) == cores


def test_cgroup_v1_quota_and_its_absence(tmp_path):
    v1 = tmp_path / "cpu,cpuacct"
    v1.mkdir()
    (v1 / "cpu.cfs_quota_us").write_text("100000\n")
    (v1 / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_quota(str(tmp_path)) == 1.0 and usable_cpus(str(tmp_path)) == 1
    (v1 / "cpu.cfs_quota_us").write_text("-1\n")  # v1's "no quota"
    assert cgroup_quota(str(tmp_path)) == 0.0
    assert cgroup_quota(str(tmp_path / "nothing")) == 0.0  # no cgroup files at all
