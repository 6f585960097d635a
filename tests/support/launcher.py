"""``python -m launch.local`` as a test runs it: a subprocess whose output is read live, with arrival times.

Tests wait for events in that output ("both actors delivered", "an epoch was logged"), each with a generous
deadline that only guards against a hang: nothing here depends on how much work fits into some seconds.
"""

import re
import signal
import subprocess
import sys
import threading
import time

import psutil

from tests.support.paths import ROOT
from tests.support.runs import free_base_port

HANG_GUARD_S = 180.0  # longest wait for an event: on a slow, loaded machine a start-up (torch, spawn) takes seconds

# A small training run on the fake env: trains within seconds of the first batches on 2 CPU cores.
# --eval.every-env-steps 0: these tests count and kill actor processes; the evaluation process is tested in
# tests/integration/test_launch.py,
# the end-of-run evaluation (--eval.final-episodes) in tests/integration/test_final_eval.py
SMALL_LEARNER = (
    "--learner.no-compile",
    "--learner.micro-batch",
    "16",
    "--learner.min-replay",
    "300",
    "--learner.updates-per-epoch",
    "5",
)
"""A learner that starts training within seconds of the first batches: no compile, batch 16, epochs of 5 updates."""

TRAINING = (
    *SMALL_LEARNER,
    "--replay.capacity",
    "4096",
    "--eval.every-env-steps",
    "0",
    "--learner.broadcast-env-steps",
    "50",
    "--eval.final-episodes",
    "0",
)


def fake_run_cmd(tmp_path, base: int, *args: str) -> list[str]:
    """``launch.local`` with 2 actors on the fake env, ports from ``base``, runs under ``tmp_path``, no progress bar,
    plain TCP on loopback (``--transport.open-loopback``: the run's own CURVE keys cost these short runs about a fifth
    more CPU; tests/reliability/test_security.py runs the keyed default end to end); ``args`` add or override."""
    cmd = [sys.executable, "-m", "launch.local", "--actors", "2", "--no-progress", "--env.name", "fake"]
    return [*cmd, "--transport.base-port", str(base), "--run-dir", str(tmp_path), "--transport.open-loopback", *args]


def run_fake(tmp_path, *args: str, timeout: float = 240.0, code: int = 0) -> str:
    """:func:`fake_run_cmd` on fresh ports, a console line every 2 s, run to its end: asserts exit ``code`` and returns
    its stdout. A ``--resume`` takes the run's own env from its folder, and these actors and ports (launch/resume.py)."""
    cmd = fake_run_cmd(tmp_path, free_base_port(4) + 2, "--log-every", "2", *args)
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == code, proc.stdout + proc.stderr
    return proc.stdout


def start_launcher(tmp_path, *args, collect_only=True):
    """2 actors on the fake env, a console line every second, plain output on a pipe; ``args`` add or override."""
    cmd = fake_run_cmd(tmp_path, free_base_port(4) + 2, "--log-every", "1", *args)
    if collect_only:
        cmd.append("--collect-only")
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def assert_all_gone(children, at_least: int = 2):
    """Every process in ``children`` (``at_least`` of them: by default the two actors) has exited."""
    assert len(children) >= at_least, children
    deadline = time.monotonic() + 10  # the launcher has exited: its children are reaped or going
    while time.monotonic() < deadline and any(running(c) for c in children):
        time.sleep(0.05)
    alive = [c for c in children if running(c)]
    assert not alive, alive


def running(p: psutil.Process) -> bool:
    """Whether ``p`` is alive and not a zombie."""
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class Launcher:
    """``python -m launch.local`` in a subprocess; a thread keeps every output line with its monotonic time."""

    def __init__(self, tmp_path, *args, collect_only=False):
        self.proc = start_launcher(tmp_path, *args, collect_only=collect_only)
        self.lines: list[tuple[float, str]] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            with self._lock:
                self.lines.append((time.monotonic(), line.rstrip("\n")))

    @property
    def output(self) -> str:
        with self._lock:
            return "\n".join(line for _, line in self.lines)

    def matches(self, pattern: str, after: float = 0.0) -> list[tuple[float, re.Match]]:
        with self._lock:
            lines = list(self.lines)
        return [(t, m) for t, line in lines if t >= after and (m := re.search(pattern, line))]

    def wait_for(self, pattern: str, timeout: float, after: float = 0.0, count: int = 1) -> list[tuple[float, re.Match]]:
        """The first ``count`` lines matching ``pattern`` that arrived at or after ``after``; fails on timeout or exit."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.matches(pattern, after)
            if len(found) >= count:
                return found[:count]
            if self.proc.poll() is not None:
                self._reader.join(timeout=5)
                found = self.matches(pattern, after)
                assert len(found) >= count, f"launcher exited ({self.proc.returncode}) before {pattern!r}:\n{self.output}"
                return found[:count]
            time.sleep(0.05)
        raise AssertionError(f"no {count} line(s) matching {pattern!r} within {timeout}s:\n{self.output}")

    def wait_for_delivery(self, slots: int, timeout: float = HANG_GUARD_S, after: float = 0.0) -> list[int]:
        """Wait until a [PROCESSOR] line (since ``after``) shows every one of ``slots`` actors with transitions in
        replay; returns its per-actor counts."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lines = processor_lines(self, after)
            if lines and len(lines[-1][3]) == slots and min(lines[-1][3]) > 0:
                return lines[-1][3]
            assert self.proc.poll() is None, f"launcher exited ({self.proc.returncode}):\n{self.output}"
            time.sleep(0.1)
        raise AssertionError(f"not every one of {slots} actors delivered within {timeout}s:\n{self.output}")

    def wait_exit(self, timeout: float = HANG_GUARD_S) -> str:
        """Wait for the launcher to exit by itself (a hang guard); return the whole output."""
        self.proc.wait(timeout=timeout)
        self._reader.join(timeout=10)
        return self.output

    def actors(self) -> list[psutil.Process]:
        """The live actor processes (spawned children, not the resource tracker)."""
        found = []
        for child in psutil.Process(self.proc.pid).children(recursive=True):
            try:
                cmd = " ".join(child.cmdline())
                if "spawn_main" in cmd and "resource_tracker" not in cmd and child.status() != psutil.STATUS_ZOMBIE:
                    found.append(child)
            except psutil.NoSuchProcess:
                pass
        return found

    def descendants(self) -> set[psutil.Process]:
        try:
            return set(psutil.Process(self.proc.pid).children(recursive=True))
        except psutil.NoSuchProcess:
            return set()

    def stop(self, timeout: float = 60.0) -> str:
        """Ctrl-C, wait for exit (a hang guard), return the whole output."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=timeout)
        self._reader.join(timeout=10)
        return self.output

    def kill(self) -> None:
        """Last resort after a failed test: no launcher or actor outlives it."""
        procs = self.descendants()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(timeout=10)
        for p in procs:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass


def processor_lines(launcher: Launcher, after: float = 0.0) -> list[tuple[float, int, float, list[int]]]:
    """(arrival time, processed, rate, per-actor transitions) of every [PROCESSOR] line since ``after``."""
    out = []
    for t, m in launcher.matches(r"\[PROCESSOR\] Processed: ([\d,]+), .*Rate: ([\d,]+)/s, Per actor: \[([\d, ]*)\]", after):
        out.append((t, int(m[1].replace(",", "")), float(m[2].replace(",", "")), [int(x) for x in m[3].split(",")]))
    return out


EPOCH = r"\[MAIN\] Epoch (\d+) "


FAKE_BATCH = 64  # transitions per fake-env message: 1 env x the default 64 steps
STOPPED = r"\[MAIN\] stopped after [\d.]+s by "


def last_line(out: str) -> str:
    return out.rstrip("\n").splitlines()[-1]


def collect_until_exit(run: Launcher) -> tuple[str, set]:
    """Wait for a run that ends by itself, keeping every descendant seen meanwhile (for assert_all_gone)."""
    seen = set()
    while run.proc.poll() is None:
        seen |= run.descendants()
        try:
            run.proc.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            pass
    return run.wait_exit(), seen


def run_to_the_end(tmp_path, *args, collect_only: bool) -> tuple[Launcher, str]:
    """A run that must end by itself: exit 0, no traceback, every process it started gone; returns its output."""
    run = Launcher(tmp_path, *args, collect_only=collect_only)
    try:
        out, seen = collect_until_exit(run)
    finally:
        run.kill()
    assert run.proc.returncode == 0, out
    assert "Traceback" not in out, out
    assert_all_gone(seen)
    return run, out


def resume_without_actors(run_dir: str, *extra: str) -> subprocess.CompletedProcess:
    """``launch.local --resume RUN_DIR`` with a 5-update budget and no actors: a run with nothing left to train loads
    its checkpoint, saves it again and exits; ``extra`` adds flags."""
    cmd = [sys.executable, "-m", "launch.local", "--resume", run_dir, "--learner.steps", "5", "--no-progress"]
    return subprocess.run([*cmd, "--no-spawn-actors", *extra], cwd=ROOT, capture_output=True, text=True, timeout=120)
