"""A run's replay saved with the checkpoint it belongs to, and read back only by a resume of that same checkpoint.

``replay/`` in the run folder holds one ``.npy`` per array of the replay (``FrameReplay.saved_arrays``: the rings, heads,
last writes and, prioritized, the priorities), written under the replay's lock in chunks straight from its memory (a
device ring through one host chunk at a time), so a save never holds a second copy of the replay. ``stamp.json``,
written last, marks it complete: the counters of its checkpoint (``STAMP_KEYS``: run, epoch, updates, env steps
inserted and samples trained, the rate limiter's two), the replay's layout and its scalars. A save is written to
``replay.tmp-PID/``, fsync'd and swapped into place, so a crash or a full disk leaves the previous complete replay (or
none) and no partial one. A resume uses it only when its stamp equals the resumed checkpoint's; otherwise one line
says why (stale, empty, incomplete, corrupt, another layout) and the run goes on with an empty replay.
"""

from __future__ import annotations

import contextlib
import glob
import json
import math
import os
import shutil
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from learner.checkpoint import fsync_dir
from learner.replay.frame_ring import FrameReplay

REPLAY_DIR = "replay"
REPLAY_NAME = REPLAY_DIR + "/"  # as the run's results name it (launch/local.py)
LEGACY_NAME = "replay.pt"  # earlier releases' replay, saved without its checkpoint's stamp: never used
STAMP_NAME = "stamp.json"
STAMP_KEYS = ("run", "epoch", "updates", "inserted", "samples_trained")  # learner/epoch.py's Counters a stamp holds
FORMAT = 1  # stamp.json's "format": what this module writes and reads
CHUNK_BYTES = 64 << 20  # bytes read or written at a time; the most host memory a device ring's copy takes
_LEFTOVERS = (f"{REPLAY_DIR}.tmp-*", f"{REPLAY_DIR}.old-*", f"{LEGACY_NAME}.tmp")  # what unfinished saves leave


class _Refused(Exception):
    """Why a saved replay is not used, in the words of the line that says so."""


def replay_stamp(counters: dict[str, Any]) -> dict[str, int]:
    """The stamp of a replay saved with a checkpoint holding ``counters`` (learner/epoch.py's, as a dict)."""
    return {key: int(counters.get(key, 0)) for key in STAMP_KEYS}


class PendingReplay:
    """A replay written whole to its temporary folder, neither durable nor in place yet: ``commit`` or ``discard`` it."""

    def __init__(self, run_dir: str, tmp: str, manifest: dict[str, Any]):
        self.run_dir, self.tmp, self.manifest = run_dir, tmp, manifest

    def commit(self) -> str:
        """fsync its files, write ``stamp.json`` (last: the mark of a complete replay) and swap the folder in for the run's
        replay; its path. On any error the temporary folder is removed and the previous replay stays."""
        final = os.path.join(self.run_dir, REPLAY_DIR)
        old = f"{final}.old-{os.getpid()}"
        try:
            for name in os.listdir(self.tmp):
                _fsync_file(os.path.join(self.tmp, name))
            with open(os.path.join(self.tmp, STAMP_NAME), "w", encoding="utf-8") as fh:
                json.dump(self.manifest, fh)
                fh.flush()
                os.fsync(fh.fileno())
            fsync_dir(self.tmp)
            if os.path.lexists(final):
                os.replace(final, old)  # a folder cannot be renamed over a full one: the previous one steps aside
            os.replace(self.tmp, final)
        except BaseException:
            self.discard()
            if os.path.lexists(old) and not os.path.lexists(final):
                with contextlib.suppress(OSError):
                    os.replace(old, final)  # the previous replay back in place
            raise
        fsync_dir(self.run_dir)
        _remove(old)
        return final

    def discard(self) -> None:
        """Remove the temporary folder (the run's replay stays as it was)."""
        _remove(self.tmp)


def write_replay(run_dir: str, replay: FrameReplay, stamp: dict[str, int]) -> PendingReplay:
    """``replay`` as it is now, written under its lock to a temporary folder in ``run_dir`` without waiting for the disk
    (``commit`` does); on any error the folder is removed and the error raised."""
    discard_partial_replay(run_dir)
    tmp = os.path.join(run_dir, f"{REPLAY_DIR}.tmp-{os.getpid()}")
    os.mkdir(tmp)
    try:
        with replay._lock:  # the rings as the heads say, and the heads as the stamp's counters say
            arrays = replay.saved_arrays()
            for name, array in arrays.items():
                _write_array(os.path.join(tmp, name + ".npy"), array)
            scalars = replay.saved_scalars()
    except BaseException:
        _remove(tmp)
        raise
    manifest = {"format": FORMAT, "stamp": dict(stamp), "layout": replay.layout(), "scalars": scalars, "arrays": sorted(arrays)}
    return PendingReplay(run_dir, tmp, manifest)


def save_replay(run_dir: str, replay: FrameReplay, stamp: dict[str, int]) -> str:
    """Save ``replay``, stamped ``stamp`` (its checkpoint's, ``replay_stamp``), as the run's replay, whole or not at all."""
    return write_replay(run_dir, replay, stamp).commit()


def discard_partial_replay(run_dir: str) -> list[str]:
    """Remove what unfinished replay saves left in ``run_dir``; their paths."""
    found = sorted(path for pattern in _LEFTOVERS for path in glob.glob(os.path.join(glob.escape(run_dir), pattern)))
    for path in found:
        _remove(path)
    return found


def discard_stale_replay(run_dir: str, stamp: dict[str, int]) -> str:
    """Remove ``run_dir``'s saved replay unless it belongs to the checkpoint stamped ``stamp``; the path removed, or ''."""
    folder = os.path.join(run_dir, REPLAY_DIR)
    if not os.path.lexists(folder):
        return ""
    with contextlib.suppress(OSError, ValueError, AttributeError):  # unreadable: no resume would use it either
        with open(os.path.join(folder, STAMP_NAME), encoding="utf-8") as fh:
            if json.load(fh).get("stamp") == stamp:
                return ""
    _remove(folder)
    return folder


def restore_replay(run_dir: str, replay: FrameReplay, stamp: dict[str, int], say: Callable[[str], None] | None = None) -> str:
    """Load ``run_dir``'s saved replay into ``replay`` (empty, just built) when its stamp is ``stamp``, that of the checkpoint
    the run resumed; else leave ``replay`` empty. One line says which (nothing when the folder holds no saved replay);
    it is returned. Nothing found on disk makes it raise."""
    say = say or _print
    if len(replay):
        raise ValueError(f"restore_replay needs an empty replay; this one holds {len(replay):,} transitions")
    with contextlib.suppress(OSError):
        for path in discard_partial_replay(run_dir):
            say(f"[MAIN] removed {path}, left by a replay save that did not finish")
    folder, legacy = os.path.join(run_dir, REPLAY_DIR), os.path.join(run_dir, LEGACY_NAME)
    if os.path.lexists(legacy):  # no stamp: read back, it would fill the resume of any later checkpoint too
        _remove(legacy)
        if not os.path.lexists(folder):
            return _said(say, _not_used(legacy, "an earlier release's, without its checkpoint's stamp; removed"))
    if not os.path.lexists(folder):
        return ""
    try:
        _restore(folder, replay, stamp)
    except _Refused as why:
        return _said(say, _not_used(folder, str(why)))
    except Exception as exc:  # noqa: BLE001 - whatever is on disk, the run goes on without it
        return _said(say, _not_used(folder, f"corrupt ({_words(exc)})"))
    return _said(say, f"[MAIN] replay restored from {folder}: {len(replay):,} transitions")


def _not_used(path: str, why: str) -> str:
    return f"[MAIN] the saved replay {path} is not used ({why}); replay starts empty"


def _said(say: Callable[[str], None], line: str) -> str:
    say(line)
    return line


def _restore(folder: str, replay: FrameReplay, stamp: dict[str, int]) -> None:
    """Fill ``replay`` from ``folder``, everything checked before the first byte goes in; _Refused saying why not."""
    if not os.path.isdir(folder):
        raise _Refused("corrupt (not a folder)")
    entries = os.listdir(folder)
    if not entries:
        raise _Refused("empty")
    manifest = _read_manifest(folder, entries)
    if why := _stale(manifest["stamp"], stamp) or _layout_differs(manifest["layout"], replay.layout()):
        raise _Refused(why)
    arrays = replay.saved_arrays()
    if manifest["arrays"] != sorted(arrays) or set(manifest["scalars"]) != set(replay.saved_scalars()):
        raise _Refused(f"corrupt ({STAMP_NAME} lists {manifest['arrays']} and {sorted(manifest['scalars'])})")
    files = {name: os.path.join(folder, name + ".npy") for name in arrays}
    offsets = {name: _data_offset(files[name], array) for name, array in arrays.items()}
    host = {name: array for name, array in arrays.items() if isinstance(array, np.ndarray)}  # small: heads, priorities
    rings = {name: array for name, array in arrays.items() if not isinstance(array, np.ndarray)}
    try:
        values = {name: _read_new(files[name], offsets[name], array) for name, array in host.items()}
        if why := _implausible(values, manifest["scalars"]):
            raise _Refused(f"corrupt ({why})")
        with replay._lock:
            for name, ring in rings.items():  # a failure here leaves the heads at 0: the replay stays empty
                _read_into(files[name], offsets[name], ring)
            for name, array in host.items():
                array[...] = values[name]
            replay.restored(manifest["scalars"])
    except (OSError, ValueError) as exc:
        raise _Refused(f"corrupt ({_words(exc)})") from exc


def _read_manifest(folder: str, entries: list[str]) -> dict[str, Any]:
    """``stamp.json`` of ``folder``, checked for the keys this module writes; _Refused when missing or unreadable."""
    if STAMP_NAME not in entries:
        raise _Refused(f"incomplete: no {STAMP_NAME}, which a save writes last")
    try:
        with open(os.path.join(folder, STAMP_NAME), encoding="utf-8") as fh:
            text = fh.read()
        manifest = json.loads(text) if text else None
    except (OSError, ValueError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise _Refused(f"corrupt ({STAMP_NAME}: {_words(exc)})") from exc
    if not text:
        raise _Refused(f"corrupt ({STAMP_NAME} is empty)")
    kinds = {"stamp": dict, "layout": dict, "scalars": dict, "arrays": list}
    if not (
        isinstance(manifest, dict)
        and manifest.get("format") == FORMAT
        and all(isinstance(manifest.get(key), kind) for key, kind in kinds.items())
    ):
        raise _Refused(f"corrupt ({STAMP_NAME} is not a replay stamp of format {FORMAT})")
    return manifest


def _implausible(values: dict[str, np.ndarray], scalars: dict[str, Any]) -> str:
    """What no replay could hold among a saved replay's heads, counts and priorities ('' when nothing), which would
    otherwise fail a sample in the middle of training."""
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in scalars.values()):
        return f"{STAMP_NAME}'s scalars {scalars}"
    head, last, written = values["head"], values["last_write"], scalars["written"]
    if not (isinstance(written, int) and head.min() >= 0 and int(head.sum()) == written):
        return f"heads summing to {int(head.sum()):,}, {written!r} written"
    if not (last.min() >= 0 and last.max() <= written):
        return f"last writes outside [0, {written:,}]"
    priorities = values.get("priorities")
    if priorities is not None and not (np.isfinite(priorities).all() and priorities.min() >= 0):
        return "priorities not all finite and >= 0"
    return ""


def _stale(saved: dict[str, Any], wanted: dict[str, int]) -> str:
    """Why a replay stamped ``saved`` does not belong to the checkpoint stamped ``wanted`` ('' when it does)."""
    if {key: saved.get(key) for key in STAMP_KEYS} == wanted:
        return ""
    if saved.get("run") != wanted["run"]:
        return f"stale: saved by run {saved.get('run')}, the checkpoint is run {wanted['run']}'s"
    if (saved.get("inserted"), saved.get("updates")) != (wanted["inserted"], wanted["updates"]):
        return (
            f"stale: saved at {_count(saved.get('inserted'))} env steps ({_count(saved.get('updates'))} updates), "
            f"the checkpoint is at {wanted['inserted']:,} env steps ({wanted['updates']:,} updates)"
        )
    differ = [key for key in STAMP_KEYS if saved.get(key) != wanted[key]]  # epoch or samples trained alone
    at = ", ".join(f"{key} {_count(saved.get(key))}" for key in differ)
    return f"stale: saved at {at}, the checkpoint is at {', '.join(f'{key} {wanted[key]:,}' for key in differ)}"


def _layout_differs(saved: dict[str, Any], ours: dict[str, Any]) -> str:
    """What differs between a saved replay's layout and this replay's ('' when nothing)."""
    keys = sorted(set(saved) | set(ours))
    differ = [f"{key} {saved.get(key)!r} saved, {ours.get(key)!r} here" for key in keys if saved.get(key) != ours.get(key)]
    return "layout differs: " + "; ".join(differ) if differ else ""


def _data_offset(path: str, array: torch.Tensor | np.ndarray) -> int:
    """Where ``path``'s data starts, once its .npy header and size match ``array``'s; _Refused saying what does not."""
    name, dtype, shape = os.path.basename(path), _numpy_dtype(array), tuple(array.shape)
    if not os.path.isfile(path):
        raise _Refused(f"corrupt (no {name})")
    size = os.path.getsize(path)
    if size == 0:
        raise _Refused(f"corrupt ({name} is empty)")
    with open(path, "rb") as fh:
        try:
            version = np.lib.format.read_magic(fh)
            if version != (1, 0):
                raise ValueError(f"format version {version}, not (1, 0)")
            got_shape, fortran, got_dtype = np.lib.format.read_array_header_1_0(fh)
        except (ValueError, TypeError, SyntaxError) as exc:
            raise _Refused(f"corrupt ({name} is not a .npy file: {_words(exc)})") from exc
        offset = fh.tell()
    if tuple(got_shape) != shape or fortran or got_dtype != dtype:
        raise _Refused(f"corrupt ({name} holds {got_dtype} {list(got_shape)}, this replay {dtype} {list(shape)})")
    nbytes = math.prod(shape) * dtype.itemsize
    if size - offset != nbytes:
        raise _Refused(f"corrupt ({name} holds {size - offset:,} bytes of data, {nbytes:,} expected)")
    return offset


def _numpy_dtype(array: torch.Tensor | np.ndarray) -> np.dtype:
    return array.dtype if isinstance(array, np.ndarray) else torch.empty(0, dtype=array.dtype).numpy().dtype


def _write_array(path: str, array: torch.Tensor | np.ndarray) -> None:
    """``array`` as a .npy file (format 1.0), written from its own memory CHUNK_BYTES at a time."""
    dtype = _numpy_dtype(array)
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": tuple(array.shape)}
    with open(path, "wb") as fh:
        np.lib.format.write_array_header_1_0(fh, header)
        for chunk in _host_chunks(array, max(1, CHUNK_BYTES // dtype.itemsize)):
            fh.write(chunk.view(np.uint8).data)  # a memoryview of the array's own bytes


def _host_chunks(array: torch.Tensor | np.ndarray, step: int) -> Iterator[np.ndarray]:
    """``array``'s elements in order, ``step`` at a time, as host arrays: views of host memory, copies of a device's."""
    if isinstance(array, np.ndarray) or array.device.type == "cpu":
        flat = array.reshape(-1) if isinstance(array, np.ndarray) else array.reshape(-1).numpy()
        for start in range(0, flat.size, step):
            yield flat[start : start + step]
    else:
        ring = array.reshape(-1)
        for start in range(0, ring.numel(), step):
            yield ring[start : start + step].cpu().numpy()


def _read_new(path: str, offset: int, like: np.ndarray) -> np.ndarray:
    """A new host array shaped like ``like``, read from ``path`` at ``offset``."""
    out = np.empty_like(like)
    _read_into(path, offset, out)
    return out


def _read_into(path: str, offset: int, array: torch.Tensor | np.ndarray) -> None:
    """Fill ``array`` from ``path``'s bytes at ``offset``, CHUNK_BYTES at a time: straight into host memory, into a device's
    through one reused host chunk; ValueError when the file ends early."""
    dtype = _numpy_dtype(array)
    step = max(1, CHUNK_BYTES // dtype.itemsize)
    with open(path, "rb", buffering=0) as fh:
        fh.seek(offset)
        if isinstance(array, np.ndarray) or array.device.type == "cpu":
            flat = array.reshape(-1) if isinstance(array, np.ndarray) else array.reshape(-1).numpy()
            for start in range(0, flat.size, step):
                _read_exact(fh, flat[start : start + step].view(np.uint8), path)
        else:
            ring = array.reshape(-1)
            staging = np.empty(min(step, ring.numel()), dtype)
            for start in range(0, ring.numel(), step):
                part = ring[start : start + step]
                chunk = staging[: part.numel()]
                _read_exact(fh, chunk.view(np.uint8), path)
                part.copy_(torch.from_numpy(chunk))  # from pageable memory: done before the chunk is reused


def _read_exact(fh: Any, buffer: np.ndarray, path: str) -> None:
    """Fill the bytes of ``buffer`` from ``fh``; ValueError when the file ends first."""
    view, got = buffer.data, 0  # a writable memoryview of the array's own bytes
    while got < len(view):
        n = fh.readinto(view[got:])
        if not n:
            raise ValueError(f"{os.path.basename(path)} ends {len(view) - got:,} bytes short")
        got += n


def _fsync_file(path: str) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def _remove(path: str) -> None:
    """Remove ``path``, a folder with what it holds or a file, as far as the disk allows."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            os.remove(path)


def _count(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else repr(value)


def _words(exc: BaseException) -> str:
    """An exception in a few words: its type and the first line of its message."""
    first = str(exc).splitlines()[0][:160] if str(exc) else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def _print(line: str) -> None:
    print(line, flush=True)
