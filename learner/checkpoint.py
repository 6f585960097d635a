"""Checkpoints: written atomically, loadable with ``torch.load(..., weights_only=True)``.

Each file is written to a temporary beside it, fsync'd and renamed into place, so a crash leaves the previous one whole;
``best.pt`` and ``snapshots/`` hold the best-scoring evaluated weights, among which launch/final_eval.py chooses.
"""

from __future__ import annotations

import contextlib
import glob
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

from shared.evaluation.names import upgrade
from shared.writes import SAY_EVERY_S, InPlaceRecord, read_record

CHECKPOINT_NAME = "checkpoint.pt"
PREVIOUS_NAME = "checkpoint.prev.pt"
DAMAGED_SUFFIX = ".damaged"  # a checkpoint.pt a resume could not read, kept beside the run for inspection
CHECKPOINT_KEYS = ("learner", "counters", "config")
BEST_NAME = "best.pt"
PUBLISHED_NAME = "weights_version"
PUBLISHED_WIDTH = 32  # bytes of its record: any 64-bit version and a newline, padded with spaces
SNAPSHOT_DIR = "snapshots"
KEPT_DIR = "kept"  # the last eval.keep_weights broadcast weights (the final evaluation's late window)


def _write_temporary(path: str, state: dict) -> str:
    """``state`` whole and fsync'd in a temporary file beside ``path``; on any error it is removed."""
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as fh:
            torch.save(state, fh)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    return tmp


def fsync_dir(folder: str) -> None:
    """Make the renames in ``folder`` durable (a no-op where directories cannot be opened)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _save_atomic(path: str, state: dict) -> str:
    os.replace(_write_temporary(path, state), path)
    fsync_dir(os.path.dirname(path) or ".")
    return path


def save_checkpoint(run_dir: str, state: dict) -> str:
    """Write ``checkpoint.pt``, the replaced one kept as ``checkpoint.prev.pt``; OSError or RuntimeError leave both unchanged."""
    path, previous = os.path.join(run_dir, CHECKPOINT_NAME), os.path.join(run_dir, PREVIOUS_NAME)
    tmp = _write_temporary(path, state)
    if os.path.exists(path):  # a crash between the two renames leaves the newest checkpoint as the previous one
        os.replace(path, previous)
    os.replace(tmp, path)
    fsync_dir(run_dir)
    return path


def save_best(run_dir: str, state: dict) -> str:
    """Write ``best.pt``: ``learner.online``, ``counters`` (updates, inserted, weights_version), ``eval`` and ``config``."""
    return _save_atomic(os.path.join(run_dir, BEST_NAME), state)


def load_best(run_dir: str) -> dict | None:
    """``best.pt`` of ``run_dir``, or None when there is none or it cannot be read."""
    path = os.path.join(run_dir, BEST_NAME)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # none yet, or a foreign file: the next better evaluation replaces it
        return None


def snapshot_path(run_dir: str, weights_version: int) -> str:
    return os.path.join(run_dir, SNAPSHOT_DIR, f"v{int(weights_version)}.pt")


def save_snapshot(run_dir: str, state: dict) -> str:
    """Write an evaluated snapshot (``best.pt``'s layout) named by its ``counters.weights_version``."""
    os.makedirs(os.path.join(run_dir, SNAPSHOT_DIR), exist_ok=True)
    return _save_atomic(snapshot_path(run_dir, state["counters"]["weights_version"]), state)


def load_snapshots(run_dir: str) -> list[dict]:
    """Every readable snapshot of ``run_dir``, best in-training score first (``best_score`` of its ``eval``)."""
    found = _readable(glob.glob(os.path.join(glob.escape(run_dir), SNAPSHOT_DIR, "v*.pt")), "eval")
    return sorted((state | {"path": path} for path, state in found), key=lambda st: best_score(st["eval"]), reverse=True)


def kept_path(run_dir: str, weights_version: int) -> str:
    return os.path.join(run_dir, KEPT_DIR, f"v{int(weights_version)}.pt")


def save_kept(run_dir: str, state: dict, keep: int) -> str:
    """Write broadcast weights to kept/ and delete all but the ``keep`` newest; returns the path written."""
    os.makedirs(os.path.join(run_dir, KEPT_DIR), exist_ok=True)
    path = _save_atomic(kept_path(run_dir, state["counters"]["weights_version"]), state)
    for old in kept_versions(run_dir)[:-keep]:
        with contextlib.suppress(FileNotFoundError):
            os.remove(kept_path(run_dir, old))
    return path


def kept_versions(run_dir: str) -> list[int]:
    """The weights_versions in kept/, oldest first."""
    names = glob.glob(os.path.join(glob.escape(run_dir), KEPT_DIR, "v*.pt"))
    return sorted(int(os.path.basename(n)[1:-3]) for n in names if os.path.basename(n)[1:-3].isdigit())


def load_kept(run_dir: str) -> list[dict]:
    """Every readable kept weights of ``run_dir``, oldest first (a damaged file is skipped)."""
    return [state for _, state in _readable([kept_path(run_dir, v) for v in kept_versions(run_dir)], "learner")]


def _readable(paths: list[str], key: str) -> list[tuple[str, dict]]:
    """(path, state) of each of ``paths`` that loads on the CPU as a dict holding ``key``; other files are skipped."""
    found = []
    for path in paths:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception:  # noqa: BLE001 - a foreign or damaged file is not a candidate
            continue
        if isinstance(state, dict) and key in state:
            found.append((path, state))
    return found


def best_score(summary: dict) -> tuple[float, float]:
    """How evaluation summaries rank for ``best.pt``: success rate first, then mean score (old names upgraded)."""
    s = upgrade(summary)
    return float(s["success_rate"]), float(s["score_mean"])


def has_checkpoint(run_dir: str) -> bool:
    """Whether ``run_dir`` holds a checkpoint or the previous one (readable or not)."""
    return any(os.path.isfile(os.path.join(run_dir, name)) for name in (CHECKPOINT_NAME, PREVIOUS_NAME))


def checkpoint_mtime(run_dir: str) -> float:
    """When ``run_dir``'s newest checkpoint file was written (0.0: none)."""
    paths = [os.path.join(run_dir, name) for name in (CHECKPOINT_NAME, PREVIOUS_NAME)]
    return max((os.path.getmtime(path) for path in paths if os.path.isfile(path)), default=0.0)


def _read_checkpoint(path: str, map_location: str | torch.device) -> dict:
    """The checkpoint at ``path``; ValueError saying why when it is missing, unreadable or not a checkpoint."""
    if not os.path.isfile(path):
        raise ValueError("missing")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # truncated, bit-flipped, foreign: torch and pickle raise many kinds
        first = str(exc).split(". ")[0].splitlines()[0][:120] if str(exc) else ""  # torch's messages run long
        raise ValueError(f"unreadable ({type(exc).__name__}: {first})") from exc
    if not (isinstance(state, dict) and all(key in state for key in CHECKPOINT_KEYS)):
        raise ValueError(f"not a checkpoint (no {', '.join(CHECKPOINT_KEYS)} entries)")
    return state


def load_checkpoint(
    run_dir: str, map_location: str | torch.device = "cpu", say: Callable[[str], None] | None = None, set_aside: bool = False
) -> dict:
    """``checkpoint.pt``, else ``checkpoint.prev.pt`` (``say`` is told why); FileNotFoundError when neither exists, ValueError
    when neither reads. ``set_aside``: a damaged ``checkpoint.pt`` is kept as ``.damaged``, out of the next save's rotation."""
    if not has_checkpoint(run_dir):
        raise FileNotFoundError(f"no {CHECKPOINT_NAME} in run folder {run_dir!r}")
    faults = []
    for name in (CHECKPOINT_NAME, PREVIOUS_NAME):
        try:
            state = _read_checkpoint(os.path.join(run_dir, name), map_location)
        except ValueError as fault:
            faults.append(f"{name}: {fault}")
            continue
        if faults and say is not None:
            c = state["counters"]
            say(
                f"[MAIN] {faults[0]}; loading {name} instead (epoch {c.get('epoch', 0)}, {c.get('updates', 0):,} "
                f"updates, {c.get('inserted', 0):,} env steps): what was trained after it is lost"
            )
        damaged = os.path.join(run_dir, CHECKPOINT_NAME)
        if faults and set_aside and os.path.isfile(damaged):
            os.replace(damaged, damaged + DAMAGED_SUFFIX)
            if say is not None:
                say(f"[MAIN] the damaged file is kept as {damaged + DAMAGED_SUFFIX}")
        return state
    raise ValueError(f"run folder {run_dir!r} has no readable checkpoint: {'; '.join(faults)}")


def discard_partial(run_dir: str) -> list[str]:
    """Remove temporary files a crashed save left behind; returns their paths."""
    patterns = [f"{base}.tmp-*" for base in (CHECKPOINT_NAME, BEST_NAME, PUBLISHED_NAME)]  # the record's: older releases
    patterns += [os.path.join(folder, "*.pt.tmp-*") for folder in (SNAPSHOT_DIR, KEPT_DIR)]
    leftovers = sorted(name for pattern in patterns for name in glob.glob(os.path.join(glob.escape(run_dir), pattern)))
    for path in leftovers:
        os.remove(path)
    return leftovers


def record_published(run_dir: str, version: int) -> None:
    """Note ``version`` as the newest weights version handed to actors, fsync'd: overwritten in place, so once the
    file is made a full disk does not refuse it (shared/writes.py ``InPlaceRecord``)."""
    InPlaceRecord(os.path.join(run_dir, PUBLISHED_NAME), PUBLISHED_WIDTH, sync=True).write(f"{int(version)}\n")


def read_published(run_dir: str) -> int:
    """The newest weights version recorded by ``record_published``, padded or written whole by an older release (-1:
    none, or not a number)."""
    try:
        return int(read_record(os.path.join(run_dir, PUBLISHED_NAME)))
    except (OSError, ValueError):
        return -1


def load_resume_state(run_dir: str) -> dict:
    """The run's last readable checkpoint (else the previous one, said), crashed saves' temporaries removed; on the CPU, as
    onto a GPU a non-fused Adam's ``step`` would be a CUDA tensor read back with ``.item()`` per parameter each update."""
    for path in discard_partial(run_dir):
        print(f"[MAIN] removed {path}, left by a save that did not finish", flush=True)
    return load_checkpoint(run_dir, map_location="cpu", say=lambda line: print(line, flush=True), set_aside=True)


def cpu_copy(state: Any) -> Any:
    """``state`` with every tensor copied to the CPU, for a save by another thread while training changes the originals."""
    if isinstance(state, torch.Tensor):
        return state.detach().to("cpu", copy=True)
    if isinstance(state, dict):
        return {k: cpu_copy(v) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(cpu_copy(v) for v in state)
    return state


class Checkpointer:
    """Writes checkpoints of ``state()`` by time and by epochs at epoch ends, on a thread of its own; failures are retried."""

    def __init__(
        self,
        run_dir: str,
        state: Callable[[], dict],
        echo: Callable[[str], None],
        every_epochs: int = 0,
        every_seconds: float = 0.0,
    ):
        self.run_dir, self.state, self.echo = run_dir, state, echo
        self.every_epochs, self.every_seconds = every_epochs, every_seconds
        self.failed = False  # the last save failed: retry at the next epoch
        self.failures = 0  # saves failed in a row
        self._failure_said_at: float | None = None  # when a failure in this row was last said
        self.pending: dict[str, Callable[[], Any]] = {}  # start-up files a full disk refused, written before the next save
        self._last = time.monotonic()  # when the last save was started
        self._writing: tuple[threading.Thread, int, list] | None = None  # (thread, epoch, [its error]) of a save under way

    def due(self, epoch: int) -> bool:
        """Whether a checkpoint falls due at the end of ``epoch`` (a failed one is due again at once)."""
        if self._writing is not None:
            return False
        by_epochs = self.every_epochs > 0 and epoch % self.every_epochs == 0
        return self.failed or by_epochs or (self.every_seconds > 0 and time.monotonic() - self._last >= self.every_seconds)

    def _write(self, state: dict) -> str:
        for name, write in list(self.pending.items()):  # a checkpoint is only worth as much as the files beside it
            write()
            del self.pending[name]
        return save_checkpoint(self.run_dir, state)

    def save(self) -> str:
        """Write a checkpoint now, on this thread (after any save under way)."""
        self.wait()
        self._last = time.monotonic()
        return self._write(self.state())

    def start(self, epoch: int, then: Callable[[bool], None] | None = None) -> None:
        """Write a checkpoint by a thread of its own, from a CPU copy of the state taken now; ``poll`` says how it went.
        ``then(written)`` runs on that thread once the save is over (the replay saved with it: put in place or dropped)."""
        state, error = cpu_copy(self.state()), []
        self._last = time.monotonic()

        def write() -> None:
            written = False
            try:
                self._write(state)
                written = True
            except (OSError, RuntimeError) as exc:  # torch.save reports a failed write as RuntimeError
                error.append(exc)
            finally:
                if then is not None:
                    then(written)

        thread = threading.Thread(target=write, name="checkpoint", daemon=True)
        self._writing = (thread, epoch, error)
        thread.start()

    def poll(self) -> None:
        """Say how a save started earlier went, once it is over."""
        if self._writing is not None and not self._writing[0].is_alive():
            _, epoch, error = self._writing
            self._writing = None
            self._outcome(epoch, error[0] if error else None, last=False)

    def wait(self) -> None:
        if self._writing is not None:
            self._writing[0].join()
            self.poll()

    def _outcome(self, epoch: int, exc: BaseException | None, last: bool) -> bool:
        if exc is not None:  # said at its first, then at most once per SAY_EVERY_S while the failures go on, and at exit
            self.failed, self.failures, now = True, self.failures + 1, time.monotonic()
            if last or self._failure_said_at is None or now - self._failure_said_at >= SAY_EVERY_S:
                self._failure_said_at = now
                then = "the run ends without it" if last else "training goes on and the next epoch tries again"
                why = f"{type(exc).__name__}: {exc}; {self.failures} failed in a row"
                self.echo(f"[MAIN] checkpoint at epoch {epoch} failed ({why}); {then}")
            return False
        if self.failed:
            self.echo(f"[MAIN] checkpoint at epoch {epoch} written after {self.failures} failed")
        self.failed, self.failures, self._failure_said_at = False, 0, None
        return True

    def save_or_say(self, epoch: int, last: bool = False) -> bool:
        """Save now, or say why not (the files on disk stay as they were); ``last``: the one at exit. Whether written."""
        try:
            self.save()
        except (OSError, RuntimeError) as exc:  # torch.save reports a failed write as RuntimeError
            return self._outcome(epoch, exc, last)
        return self._outcome(epoch, None, last)


def checkpoint_mismatch(state: dict, net: torch.nn.Module) -> str:
    """Why ``state``'s online network does not load into ``net`` ('' when it does): another release's or env's network."""
    try:
        net.load_state_dict(state["learner"]["online"])
    except (RuntimeError, KeyError, TypeError) as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        return "; ".join(lines[:2])[:300]
    return ""
