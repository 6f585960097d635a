"""Actors die while the learner trains: one killed (the launcher restarts it), or all of them (the learner waits).

Real launcher / learner, real actor processes, real sockets, real torch; the fake env keeps it fast.
"""

import re
import threading
import time

import psutil

from actors.collector import actor_main
from launch.processes import ActorPool
from learner.loop import IDLE_NOTICE_EVERY, Learner
from shared.resolution import resolve_run
from tests.support.launcher import EPOCH, TRAINING, Launcher, assert_all_gone, processor_lines
from tests.support.runs import small_config

RESTART_BOUND_S = 5.0  # the promise: a dead actor's slot is running again within 5 s


def test_a_killed_actor_is_restarted_within_5s_and_training_goes_on_with_no_batch_accepted_twice(tmp_path):
    run = Launcher(tmp_path, "--actors", "4", *TRAINING)
    seen = set()
    try:
        run.wait_for(EPOCH, timeout=120, count=2)  # training
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # every slot has been heard from and all 4 actors are up
            lines = processor_lines(run)
            if len(run.actors()) == 4 and lines and min(lines[-1][3]) > 0:
                break
            time.sleep(0.2)
        old = run.actors()
        assert len(old) == 4, run.output
        seen |= run.descendants()

        victim = old[1]
        killed_at = time.monotonic()
        victim.kill()  # SIGKILL mid-training: no chance to flush or say goodbye
        ((restarted_at, m),) = run.wait_for(r"\[MAIN\] actor (\d) exited; restarted \(restarts: 1\)", timeout=30, after=killed_at)
        slot = int(m[1])
        restart_s = restarted_at - killed_at
        seen |= run.descendants()
        new = [p for p in run.actors() if p.pid not in {q.pid for q in old}]
        print(
            f"\nactor slot {slot} (pid {victim.pid}) SIGKILLed; launcher restarted it as pid "
            f"{[p.pid for p in new]} after {restart_s:.2f}s (bound {RESTART_BOUND_S}s)"
        )
        assert restart_s <= RESTART_BOUND_S, run.output
        assert len(new) == 1 and len(run.actors()) == 4, run.output

        ((inc_at, m),) = run.wait_for(
            rf"\[MAIN\] actor {slot} now sends as incarnation (0x[0-9a-f]+) \(was (0x[0-9a-f]+)\)", timeout=90, after=killed_at
        )
        assert m[1] != m[2]
        print(f"slot {slot}: new incarnation {m[1]} (was {m[2]}) accepted {inc_at - killed_at:.2f}s after the kill")

        epochs_at_kill = max(int(mm[1]) for t, mm in run.matches(EPOCH) if t <= killed_at)
        later = run.wait_for(EPOCH, timeout=90, after=inc_at, count=2)  # updates still rise, with the new actor in
        assert int(later[-1][1][1]) > epochs_at_kill
        seen |= run.descendants()
        out = run.stop()
    finally:
        run.kill()
    assert run.proc.returncode == 0, out
    assert "Traceback" not in out, out

    # Accounting at exit, per (slot, incarnation): each seq taken once (accepted + rejected + gaps == seqs), none twice.
    fields = r"seqs (\d+), accepted (\d+), rejected (\d+), duplicates (\d+), gaps (\d+)"
    per_incarnation = [
        (int(x[1]), x[2], *map(int, x.groups()[2:]))
        for x in re.finditer(rf"\[MAIN\] actor (\d) incarnation (0x[0-9a-f]+): {fields}", out)
    ]
    total = re.search(rf"\[MAIN\] accounting: (\d+) incarnation\(s\) on (\d+) slot\(s\), {fields}", out)
    assert total, out
    print("per incarnation (slot, incarnation, seqs, accepted, rejected, duplicates, gaps):", per_incarnation)
    print("all:", total[0])
    assert sorted(e[1] for e in per_incarnation) == sorted([m[1], m[2]]), out  # the killed slot: old and new
    assert all(e[0] == slot for e in per_incarnation), out
    for _, _, seqs, accepted, rejected, duplicates, gaps in per_incarnation:
        assert accepted > 0 and accepted + rejected + gaps == seqs and duplicates == 0, out
    t_inc, t_slots, seqs, accepted, rejected, duplicates, gaps = map(int, total.groups())
    assert (t_inc, t_slots) == (5, 4), out
    assert accepted + rejected + gaps == seqs and duplicates == 0, out
    processed = processor_lines(run)[-1]
    assert processed[1] == sum(processed[3]), out  # every accepted transition went into replay exactly once
    assert_all_gone(seen)


def test_when_every_actor_is_dead_the_learner_waits_says_so_every_10s_and_resumes(tmp_path):
    cfg = small_config(actors=2, envs=1, steps=32, capacity=4096)
    cfg.collect_only = False
    cfg.actor.weights_timeout = 10.0
    cfg.learner.compile = False
    cfg.learner.micro_batch = 16
    cfg.learner.min_replay = 200
    cfg.learner.updates_per_epoch = 5
    cfg.learner.threads = 1
    learner = Learner(resolve_run(cfg, device="cpu"), str(tmp_path)).start()
    said: list[tuple[float, str]] = []
    learner.echo = lambda line: said.append((time.monotonic(), line))
    errors: list[BaseException] = []

    def loop():
        try:
            learner.run()
        except BaseException as exc:  # the test fails on it below
            errors.append(exc)

    thread = threading.Thread(target=loop, name="learner")
    pool = ActorPool(actor_main, cfg, cfg.actors).start()
    thread.start()
    try:

        def wait_until(cond, timeout, what):
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and not cond():
                assert thread.is_alive(), errors
                time.sleep(0.1)
            assert cond(), f"{what} within {timeout}s; said {said}"

        tracks = learner.plane.consolidator.tracks
        wait_until(
            lambda: learner.counters.updates > 0 and min(t.accepted_batches for t in tracks) > 0, 120, "training with both actors"
        )
        for p in pool.procs:  # every actor dies; nobody restarts them until the test does
            p.kill()
        for p in pool.procs:
            p.join(timeout=10)
        assert not any(p.is_alive() for p in pool.procs)
        died_at = time.monotonic()

        def notices_since_death():
            return sum("no experience from any actor" in line for t, line in said if t > died_at)

        # The first notice means nothing arrived for a whole notice period, so whatever the dead actors had in
        # flight has landed by then (an event, not a guessed delay); from there on nothing may arrive.
        wait_until(lambda: notices_since_death() >= 1, 2 * IDLE_NOTICE_EVERY + 60, "the first idle notice")
        processed = learner.plane.processed
        wait_until(lambda: notices_since_death() >= 2, 2 * IDLE_NOTICE_EVERY + 60, "two idle notices")
        notices = [(t, line) for t, line in said if "no experience" in line and t > died_at]
        assert learner.plane.processed == processed  # nothing arrived: the actors really are gone
        assert thread.is_alive() and not errors
        gaps = [b[0] - a[0] for a, b in zip(notices, notices[1:])]
        print(
            f"\nall actors SIGKILLed; idle notices at {[round(t - died_at, 1) for t, _ in notices]}s after, "
            f"gaps {[round(g, 2) for g in gaps]}s: {[line for _, line in notices]}"
        )
        # not before 10 s of silence (the last batch may have landed up to 1 s before the kill)
        assert notices[0][0] - died_at >= IDLE_NOTICE_EVERY - 1.0
        assert all(g >= IDLE_NOTICE_EVERY - 0.05 for g in gaps), notices  # at most one per 10 s
        assert all(re.fullmatch(r"\[MAIN\] no experience from any actor for \d+s; waiting", line) for _, line in notices)

        updates = learner.counters.updates
        restarted = pool.restart_dead(learner.plane.consolidator.slots.release)  # as the launcher does every 0.25 s
        assert restarted == [(0, 0.0), (1, 0.0)]  # a first exit restarts at once
        back_at = time.monotonic()
        wait_until(
            lambda: (
                learner.plane.processed > processed
                and learner.counters.updates > updates
                and all(len(t.old_incarnations) == 1 for t in tracks)
            ),
            120,
            "experience and updates again",
        )
        print(
            f"actors back: experience and updates rising again {time.monotonic() - back_at:.1f}s after the restart "
            f"(updates {updates} -> {learner.counters.updates})"
        )
        assert {t.incarnation for t in tracks}.isdisjoint({i for t in tracks for i in t.old_incarnations})
        assert [len(t.old_incarnations) for t in tracks] == [1, 1]
    finally:
        learner.stop()
        thread.join(timeout=60)
        codes = pool.stop_all(timeout=10)
        learner.close()
    assert not thread.is_alive() and not errors, errors
    assert codes == [0, 0]
    assert not [
        p
        for p in psutil.Process().children(recursive=True)
        if "resource_tracker" not in " ".join(p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE
    ]
