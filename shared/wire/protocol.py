"""The wire between actors and learner: one module, one version, strict decoding.

Every message is a ZeroMQ multipart message: frame 0 is a msgpack map with str keys (the header); the arrays follow as
raw C-ordered frames, never pickled and never msgpack'd element by element (pyzmq's "header frame plus raw array"
pattern). Decoding never trusts the wire: it checks sizes before parsing, the version, the kind, each dtype against
the expected one, every shape against the configured bounds, ``prod(shape) * itemsize == len(frame)`` and the values
of the small arrays; any failure raises :class:`ProtocolError` with a short ``reason`` that the learner counts. A
batch is accepted whole or not at all.

BATCH (actor -> learner), protocol version 6. E envs, T steps, observations of shape S (the env's
``EnvSpec.obs_shape``: (H, W) frames, (F,) features, (C, H, W) grids), A actions, K episodes::

    frame  content      dtype     shape            meaning
    0      header       msgpack   map              see HEADER_KEYS below
    1      frames       OBS       [E, T, *S]       f_k: observation at which a_k was chosen; each one once
                                                   (OBS: the spec's dtype, one of OBS_DTYPES)
    2      actions      u1 | u2   [E, T]           a_k < A; uint8 when A <= 256, else uint16
    3      rewards      float32   [E, T]           r_k, reward of the step from f_k (finite)
    4      terminated   uint8     [E, T]           1: the step from f_k ended the episode by termination
    5      first        uint8     [E, T]           1: f_k is an episode's first (reset) frame
    6      masks        uint8     [E, T, ceil(A/8)] when header M = 1 (masked envs), empty when M = 0:
                                  or [0]           np.packbits(mask, axis=-1, bitorder="little") of the bool
                                                   action mask at f_k (bit a of slot k: action a valid);
                                                   every slot has a valid action, a_k is valid, and the
                                                   padding bits past A are 0
    7      episodes     float32   [K, 4]           one row per episode finished in this batch, any env:
                                                   return (game units, finite), score (finite, the env's:
                                                   Mario's max x_pos, Snake's food eaten, a game's return,
                                                   negative too), success (0 or 1: Mario's flag), start (0 the
                                                   true start, 1 a hazard's saved state, 2 the frontier's)
    8      priorities   float32   [E, T] or [0]    initial replay priorities (|n-step TD error| of each slot by the
                                                   actor's network, finite, >= 0) when header P = 1; empty when P = 0

Header map (all keys required, no others): ``v`` protocol version; ``kind`` "batch"; ``actor`` slot id; ``inc``
incarnation (random per actor process start); ``seq`` message counter of this incarnation, from 0; ``wv`` weights
version the batch's first step was played with (the oldest in the batch) and ``run`` the run those weights came from
(0: none yet); ``E``, ``T`` the dimensions; ``shape`` the observation shape S (a list of 1 to 4 ints); ``K`` the
finished episodes (0 <= K <= E * T); ``P`` 1 when frame 8 carries priorities, else 0; ``M`` 1 when frame 6 carries
masks, else 0; ``dtypes`` the five array dtypes of frames 1-5 in order (numpy ``dtype.str``); ``stats`` a map of
numbers (see STAT_KEYS) describing the actor at the time of sending. The receiver checks shape, dtypes and M against
the spec it expects (:class:`Limits`).

WEIGHTS (learner -> actors, PUB on base_port-1, and as the reply to a request)::

    frame  content      dtype    meaning
    0      header       msgpack  {v, kind: "weights", run, wv, es, names, dtypes, shapes}
    1..K   tensors      per header, one raw frame per state_dict entry, in ``names`` order

``run`` identifies the learner's run (drawn when it starts, kept across its resumes) and ``wv`` counts the weights
within it: an actor takes any weights of another run, and within one run only a higher ``wv``, so a learner that
starts over at version 0 is followed at once. ``es`` is the run's env steps when the weights were sent (optional: 0
when absent), the clock of the actors' exploration schedule, so actors that join a run late (a resume, a restart)
explore at the run's age.

WEIGHTS_REQUEST (actor -> learner, DEALER to ROUTER on base_port-2): one frame,
``{v, kind: "weights_request", actor, inc, have}``; the reply is a WEIGHTS message, sent only to a request that is
behind (``have`` is not the current version) and at most once a second per connection (an actor asks each second
until one comes). The receiver checks names, shapes and dtypes against its own network.

SLOT_REQUEST (actor -> learner, the same DEALER to ROUTER): one frame, ``{v, kind: "slot_request", inc, want, E}``:
the incarnation asks for slot ``want`` (-1: any free slot) for ``E`` envs per message. The reply is one SLOT frame,
``{v, kind: "slot", inc, slot, slots, lease, reason}``: ``slot`` the granted slot (its experience socket is
base_port + slot) or -1 when refused, ``slots`` the learner's slot count, ``lease`` its lease in seconds, ``reason`` an
empty string or why it refused (learner/slots.py).

VERSION_REFUSED (learner -> actor, on the ROUTER): the reply to a request of another protocol version, one frame
``{kind: "version_refused", v, yours}`` (the learner's version and the request's), a layout no release changes, so an
actor of any version can say which versions differ and exit.

A truncated episode (time limit, actor restart, a lost batch) is marked only by the next slot's ``first`` = 1 with
``terminated`` = 0 on the slot before; see learner/replay/frame_ring.py for how stacks and n-step returns use these flags.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgpack
import numpy as np

from shared.spec import OBS_DTYPES as SPEC_OBS_DTYPES

VERSION = 7
KIND_BATCH = "batch"
KIND_WEIGHTS = "weights"
KIND_WEIGHTS_REQUEST = "weights_request"
KIND_SLOT_REQUEST = "slot_request"
KIND_SLOT = "slot"
KIND_VERSION_REFUSED = "version_refused"  # the learner's answer to a request of another version: its layout never changes
MAX_REASON_CHARS = 240  # the header decoder reads strings of at most 256 characters
WEIGHT_DTYPES = frozenset({"<f4", "<i8"})

ARRAY_NAMES = ("frames", "actions", "rewards", "terminated", "first")
ARRAY_DTYPES = (np.dtype(np.uint8), np.dtype(np.uint8), np.dtype(np.float32), np.dtype(np.uint8), np.dtype(np.uint8))
"""Mario's dtypes (frames uint8, actions uint8); other specs change the first two (:func:`batch_dtypes`)."""
OBS_DTYPES = {name: np.dtype(name) for name in SPEC_OBS_DTYPES}  # the dtypes an EnvSpec may declare
EPISODE_FIELDS = ("return", "score", "success", "start")  # the columns of the episodes frame (start: actors/starts.py)
HEADER_ALLOWANCE = 1 << 16  # bytes a BATCH's header and stats frames may take, in Limits.message_bound
HEADER_KEYS = frozenset({"v", "kind", "actor", "inc", "seq", "wv", "run", "E", "T", "shape", "K", "P", "M", "dtypes", "stats"})
MAX_OBS_DIMS = 4
NUM_FRAMES = 9  # header + frames, actions, rewards, terminated, first + masks, episodes, priorities
STAT_KEYS = frozenset(
    {
        "steps",  # env steps taken by this incarnation
        "episodes",  # episodes finished by this incarnation
        "last_return",  # return of the last finished episode
        "last_score",  # score of the last finished episode (the env's: Mario's furthest x_pos, Snake's food)
        "successes",  # episodes that succeeded (the env's success: Mario reached the flag)
        "fps",  # env steps per second over the last batch
        "dropped",  # batches dropped from the actor's staging queue so far
        "sent",  # transitions in messages handed to the socket so far, this one included
        "epsilon",  # mean exploration rate of the actor's envs at the batch's last step
    }
)
MAX_HEADER_BYTES = 4096
# Per-step values above these are a diverged actor or a forged batch, never play: one such batch would own the
# prioritized replay's mass (or overflow an n-step return) for as long as it is retained.
MAX_ABS_REWARD = 1e6  # game units per step (Mario's are at most 15 before scaling)
MAX_PRIORITY = 1e6  # |n-step TD error| in reward_scale units (Mario runs stay below 10)
_INT64_MAX = (1 << 63) - 1


class ProtocolError(ValueError):
    """A message that does not follow the protocol; ``reason`` is a short counter key."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


@dataclass(frozen=True)
class Limits:
    """What the receiver accepts (the env spec it expects and the bounds); everything else is rejected."""

    obs_shape: tuple[int, ...]
    num_actions: int
    max_envs: int = 64
    max_steps: int = 4096
    max_message_bytes: int = 64 << 20
    obs_dtype: str = "uint8"
    masked: bool = False
    if TYPE_CHECKING:  # set by __post_init__; declared for the type checker only, so fields(), repr and == stay as they are
        dtypes: tuple[np.dtype, ...] = field(init=False)
        dtype_strs: list[str] = field(init=False)
        shape_list: list[int] = field(init=False)

    def __post_init__(self) -> None:  # computed once, not per message: decode_batch is the learner's hot path
        object.__setattr__(self, "dtypes", batch_dtypes(self.obs_dtype, self.num_actions))
        object.__setattr__(self, "dtype_strs", [d.str for d in self.dtypes])
        object.__setattr__(self, "shape_list", [int(d) for d in self.obs_shape])

    def message_bound(self, envs: int, steps: int) -> int:
        """The largest valid BATCH of ``envs`` x ``steps``: every per-step frame at full size (observation, action,
        reward, both flags, mask, priority, an episode row) and ``HEADER_ALLOWANCE`` for header and stats."""
        per_step = int(np.prod(self.obs_shape)) * np.dtype(self.obs_dtype).itemsize + action_dtype(self.num_actions).itemsize
        per_step += 4 + 1 + 1 + 4 + 4 * len(EPISODE_FIELDS) + (mask_bytes(self.num_actions) if self.masked else 0)
        return envs * steps * per_step + HEADER_ALLOWANCE

    @classmethod
    def for_spec(cls, spec: Any, **bounds: int) -> Limits:
        """Limits for an :class:`shared.spec.EnvSpec` and the transport's bounds."""
        return cls(
            obs_shape=tuple(spec.obs_shape), num_actions=spec.num_actions, obs_dtype=spec.obs_dtype, masked=spec.masked, **bounds
        )


def action_dtype(num_actions: int) -> np.dtype:
    """uint8 actions up to 256 actions, uint16 up to 65,536."""
    if not 1 <= num_actions <= 1 << 16:
        raise ValueError(f"num_actions {num_actions!r} must be in [1, 65536]")
    return np.dtype(np.uint8) if num_actions <= 256 else np.dtype("<u2")


def batch_dtypes(obs_dtype: str, num_actions: int) -> tuple[np.dtype, ...]:
    """The dtypes of frames, actions, rewards, terminated, first for a spec."""
    return (np.dtype(obs_dtype), action_dtype(num_actions)) + ARRAY_DTYPES[2:]


def mask_bytes(num_actions: int) -> int:
    """Bytes of one packed action mask."""
    return (num_actions + 7) // 8


@dataclass
class Batch:
    """A decoded BATCH. Arrays are read-only views on the received frames (no copy)."""

    actor: int
    incarnation: int
    seq: int
    weights_version: int
    frames: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    first: np.ndarray
    stats: dict[str, float]
    episodes: np.ndarray  # float32 [K, 4]: return, score, success, start of each episode finished in the batch
    priorities: np.ndarray | None = None  # float32 [E, T]: the actor's initial replay priorities, if it sent them
    masks: np.ndarray | None = None  # uint8 [E, T, ceil(A/8)]: packed action masks (little bit order), masked envs
    run: int = 0  # the run whose weights played the first step (0: none yet)

    @property
    def num_transitions(self) -> int:
        return int(self.actions.size)


def encode_batch(
    actor: int,
    incarnation: int,
    seq: int,
    weights_version: int,
    frames: np.ndarray,
    actions: np.ndarray,
    rewards: np.ndarray,
    terminated: np.ndarray,
    first: np.ndarray,
    stats: dict[str, float],
    episodes: np.ndarray | None = None,
    priorities: np.ndarray | None = None,
    masks: np.ndarray | None = None,
    run: int = 0,
) -> list:
    """Return the frames of a BATCH message (header bytes + the arrays themselves, not copied), laid out as the module
    docstring says; ``episodes``, ``priorities`` and ``masks`` None send K = 0, P = 0 and M = 0."""
    arrays = (frames, actions, rewards, terminated, first)
    if frames.ndim < 3 or frames.ndim > 2 + MAX_OBS_DIMS:
        raise ValueError(f"frames must be [E, T, *obs_shape] with 1 to {MAX_OBS_DIMS} obs dims, got {frames.shape}")
    for name, arr, dtype in zip(ARRAY_NAMES, arrays, _WANTED_DTYPES):
        if not arr.flags.c_contiguous:
            raise ValueError(f"{name} must be C-contiguous")
        if dtype is not None and arr.dtype != dtype:
            raise ValueError(f"{name} must be {dtype}, got {arr.dtype}")
    dtype_strs = _DTYPE_STRS.get((frames.dtype, actions.dtype))  # None: not a whitelisted pair
    if dtype_strs is None:
        if frames.dtype.name not in OBS_DTYPES or frames.dtype.byteorder == ">":
            raise ValueError(f"frames dtype {frames.dtype} is not one of {sorted(OBS_DTYPES)}")
        raise ValueError(f"actions must be uint8 or uint16, got {actions.dtype}")
    episodes = _NO_EPISODES if episodes is None else episodes
    if episodes.dtype != np.float32 or episodes.shape[1:] != (len(EPISODE_FIELDS),) or not episodes.flags.c_contiguous:
        raise ValueError(
            f"episodes must be C-contiguous float32 [K, {len(EPISODE_FIELDS)}], got {episodes.dtype} {episodes.shape}"
        )
    n_env, n_steps = frames.shape[:2]
    if actions.shape != (n_env, n_steps):
        raise ValueError(f"actions must be [{n_env}, {n_steps}], got {actions.shape}")
    if priorities is None:
        priorities = _NO_PRIORITIES
    elif priorities.dtype != np.float32 or priorities.shape != (n_env, n_steps) or not priorities.flags.c_contiguous:
        raise ValueError(
            f"priorities must be C-contiguous float32 [{n_env}, {n_steps}], got {priorities.dtype} {priorities.shape}"
        )
    if masks is None:
        masks = _NO_MASKS
    elif masks.dtype != np.uint8 or masks.ndim != 3 or masks.shape[:2] != (n_env, n_steps) or not masks.flags.c_contiguous:
        raise ValueError(
            f"masks must be C-contiguous packed uint8 [{n_env}, {n_steps}, ceil(A/8)], got {masks.dtype} {masks.shape}"
        )
    header = {
        "v": VERSION,
        "kind": KIND_BATCH,
        "actor": int(actor),
        "inc": int(incarnation),
        "seq": int(seq),
        "wv": int(weights_version),
        "run": int(run),
        "E": n_env,
        "T": n_steps,
        "shape": [int(d) for d in frames.shape[2:]],
        "K": int(episodes.shape[0]),
        "P": int(priorities.size > 0),
        "M": int(masks.size > 0),
        "dtypes": dtype_strs,
        "stats": {k: float(stats[k]) for k in STAT_KEYS},
    }
    return [msgpack.packb(header, use_bin_type=True), *arrays, masks, episodes, priorities]


_WANTED_DTYPES = (None, None) + ARRAY_DTYPES[2:]  # frames and actions: checked against _DTYPE_STRS
_DTYPE_STRS = {
    (np.dtype(o), np.dtype(a)): [np.dtype(o).str, np.dtype(a).str] + [d.str for d in ARRAY_DTYPES[2:]]
    for o in OBS_DTYPES.values()
    for a in (np.uint8, "<u2")
}
"""The header's ``dtypes`` of every whitelisted (observation, action) dtype pair, built once (the actors' send path)."""
_NO_EPISODES = np.zeros((0, len(EPISODE_FIELDS)), np.float32)
_NO_PRIORITIES = np.zeros(0, np.float32)
_NO_MASKS = np.zeros(0, np.uint8)


def _unpackb(raw: Any, **limits: Any) -> Any:
    """A msgpack header: str keys, no bin or ext, strings of at most 256 characters, and ``limits``."""
    try:
        return msgpack.unpackb(
            memoryview(raw), raw=False, strict_map_key=True, max_str_len=256, max_bin_len=0, max_ext_len=0, **limits
        )
    except Exception as exc:  # msgpack raises several types (ValueError, ExtraData, FormatError, StackError...)
        raise ProtocolError("header_msgpack", f"{type(exc).__name__}: {exc}"[:200]) from None


def _unpack_header(raw: Any) -> dict:
    data = memoryview(raw)
    if data.nbytes > MAX_HEADER_BYTES:
        raise ProtocolError("header_size", f"header of {data.nbytes} bytes exceeds {MAX_HEADER_BYTES}")
    header = _unpackb(data, use_list=True, max_array_len=16, max_map_len=16)
    if not isinstance(header, dict):
        raise ProtocolError("header_type", f"header is {type(header).__name__}, not a map")
    return header


def _int_field(header: dict, key: str, low: int, high: int) -> int:
    value = header[key]
    if type(value) is not int or not low <= value <= high:
        raise ProtocolError("field", f"{key}={value!r} not an int in [{low}, {high}]")
    return value


def decode_batch(parts: Sequence[Any], limits: Limits) -> Batch:
    """Decode and validate a BATCH; ``parts`` are bytes, memoryviews or zmq.Frame objects."""
    header = _batch_header(parts, limits)
    actor = _int_field(header, "actor", 0, 1 << 16)
    incarnation, seq, weights_version, run = (_int_field(header, key, 0, _INT64_MAX) for key in ("inc", "seq", "wv", "run"))
    n_env = _int_field(header, "E", 1, limits.max_envs)
    n_steps = _int_field(header, "T", 1, limits.max_steps)
    n_episodes = _int_field(header, "K", 0, n_env * n_steps)
    has_priorities, has_masks = (_int_field(header, key, 0, 1) for key in ("P", "M"))
    stats = {k: float(v) for k, v in _check_layout(header, limits, has_masks).items()}
    frames, actions, rewards, terminated, first = _decode_arrays(parts[1:6], limits, (n_env, n_steps, *header["shape"]))
    masks = _decode_masks(parts[6], has_masks, n_env, n_steps, actions, limits.num_actions)
    episodes = _decode_episodes(parts[7], n_episodes)
    priorities = _decode_priorities(parts[8], has_priorities, n_env, n_steps)
    arrays = frames, actions, rewards, terminated, first
    return Batch(actor, incarnation, seq, weights_version, *arrays, stats, episodes, priorities, masks, run)


def _batch_header(parts: Sequence[Any], limits: Limits) -> dict:
    """The header of a BATCH whose frame count and size are within bounds: this version, kind BATCH, its exact keys."""
    if len(parts) != NUM_FRAMES:
        raise ProtocolError("frame_count", f"{len(parts)} frames, expected {NUM_FRAMES}")
    total = sum(memoryview(p).nbytes for p in parts)
    if total > limits.max_message_bytes:
        raise ProtocolError("oversized", f"message of {total} bytes exceeds {limits.max_message_bytes}")
    header = _unpack_header(parts[0])
    if header.get("v") != VERSION:
        raise ProtocolError("version", f"version {header.get('v')!r}, expected {VERSION}")
    if header.get("kind") != KIND_BATCH:
        raise ProtocolError("kind", f"kind {header.get('kind')!r}, expected {KIND_BATCH!r}")
    if set(header) != HEADER_KEYS:
        raise ProtocolError("field", f"keys {sorted(map(str, header))} differ from {sorted(HEADER_KEYS)}")
    return header


def _check_layout(header: dict, limits: Limits, has_masks: int) -> dict:
    """Check that the header's observation shape, dtypes and mask flag are this env's; returns its well-formed stats."""
    shape = header["shape"]
    if shape != limits.shape_list or not all(type(d) is int for d in shape):  # type: 1.0 == 1 and True == 1
        if not (
            isinstance(shape, list)
            and 1 <= len(shape) <= MAX_OBS_DIMS
            and all(type(d) is int and 1 <= d <= 1 << 16 for d in shape)
        ):
            raise ProtocolError("field", f"shape={shape!r} not a list of 1 to {MAX_OBS_DIMS} ints in [1, 65536]")
        raise ProtocolError("shape", f"observation shape {tuple(shape)} != expected {tuple(limits.obs_shape)}")
    if header["dtypes"] != limits.dtype_strs:
        raise ProtocolError("dtype", f"dtypes {header['dtypes']!r} != {limits.dtype_strs}")
    if has_masks != int(limits.masked):
        raise ProtocolError("field", f"M={has_masks} but this env is {'masked' if limits.masked else 'unmasked'}")
    stats = header["stats"]
    if (
        not isinstance(stats, dict)
        or set(stats) != STAT_KEYS
        or not all(type(v) in (int, float) and np.isfinite(v) for v in stats.values())
    ):
        raise ProtocolError("stats", f"stats must map exactly {sorted(STAT_KEYS)} to finite numbers")
    return stats


def _decode_arrays(parts: Sequence[Any], limits: Limits, obs: tuple[int, ...]) -> list[np.ndarray]:
    """Frames, actions, rewards, terminated and first, each of its exact size ([E, T, *shape], [E, T]), values in range."""
    arrays = []
    for name, part, dtype, want in zip(ARRAY_NAMES, parts, limits.dtypes, (obs,) + (obs[:2],) * 4):
        buf = memoryview(part)
        expected = int(np.prod(want)) * dtype.itemsize
        if buf.nbytes != expected:
            raise ProtocolError("size", f"{name}: {buf.nbytes} bytes, expected {expected} for {want} {dtype}")
        arrays.append(np.frombuffer(buf, dtype=dtype).reshape(want))
    frames, actions, rewards, terminated, first = arrays
    if int(actions.max()) >= limits.num_actions:
        raise ProtocolError("values", f"action {int(actions.max())} >= num_actions {limits.num_actions}")
    if int(terminated.max()) > 1 or int(first.max()) > 1:
        raise ProtocolError("values", "terminated/first flags must be 0 or 1")
    if not np.isfinite(rewards).all():
        raise ProtocolError("values", "non-finite reward")
    if (worst := float(np.abs(rewards).max())) > MAX_ABS_REWARD:
        raise ProtocolError("values", f"reward of magnitude {worst:.3g} above the bound {MAX_ABS_REWARD:g}")
    if frames.dtype.kind == "f" and not np.isfinite(frames).all():
        raise ProtocolError("values", "non-finite observation")
    return arrays


def _decode_episodes(part: Any, n_episodes: int) -> np.ndarray:
    """The episodes frame: K rows of EPISODE_FIELDS float32, finite, success 0 or 1, start 0, 1 or 2."""
    buf = memoryview(part)
    shape = (n_episodes, len(EPISODE_FIELDS))
    if buf.nbytes != math.prod(shape) * 4:
        raise ProtocolError("size", f"episodes: {buf.nbytes} bytes, expected {math.prod(shape) * 4} for {list(shape)} float32")
    episodes = np.frombuffer(buf, dtype=np.float32).reshape(shape)
    flags_ok = np.isin(episodes[:, 2], (0.0, 1.0)).all() and np.isin(episodes[:, 3], (0.0, 1.0, 2.0)).all()
    if n_episodes and not (np.isfinite(episodes).all() and flags_ok):
        raise ProtocolError("values", "episodes must be finite, with success 0 or 1 and start 0, 1 or 2")
    return episodes


def _optional_frame(part: Any, name: str, flag: str, on: int, shape: tuple[int, ...], dtype: type) -> np.ndarray | None:
    """Frame ``name`` as ``shape`` ``dtype`` when its header flag ``flag`` is 1; empty, and None, when it is 0."""
    buf = memoryview(part)
    expected = math.prod(shape) * np.dtype(dtype).itemsize if on else 0
    if buf.nbytes != expected:
        raise ProtocolError("size", f"{name}: {buf.nbytes} bytes, expected {expected} ({flag}={on})")
    return np.frombuffer(buf, dtype=dtype).reshape(shape) if on else None


def _decode_priorities(part: Any, has_priorities: int, n_env: int, n_steps: int) -> np.ndarray | None:
    """The priorities frame: [E, T] float32 in [0, MAX_PRIORITY], when P is 1; empty, and None, when it is 0."""
    priorities = _optional_frame(part, "priorities", "P", has_priorities, (n_env, n_steps), np.float32)
    if priorities is not None and not (np.isfinite(priorities).all() and (priorities >= 0).all()):
        raise ProtocolError("values", "priorities must be finite and >= 0")
    if priorities is not None and (worst := float(priorities.max())) > MAX_PRIORITY:
        raise ProtocolError("values", f"priority {worst:.3g} above the bound {MAX_PRIORITY:g}")
    return priorities


def _decode_masks(
    part: Any, has_masks: int, n_env: int, n_steps: int, actions: np.ndarray, num_actions: int
) -> np.ndarray | None:
    """The packed masks frame: its size, no bits past A, a valid action in every slot, the taken one valid."""
    masks = _optional_frame(part, "masks", "M", has_masks, (n_env, n_steps, mask_bytes(num_actions)), np.uint8)
    if masks is None:
        return None
    spare = num_actions % 8
    if spare and (masks[:, :, -1] >> spare).any():
        raise ProtocolError("values", f"mask bits set past action {num_actions - 1}")
    if not masks.any(axis=2).all():
        raise ProtocolError("values", "a slot's action mask has no valid action")
    a = actions.astype(np.intp)
    taken = np.take_along_axis(masks, (a >> 3)[..., None], axis=2)[..., 0] >> (a & 7).astype(np.uint8)
    if not (taken & 1).all():
        raise ProtocolError("values", "an action the mask of its slot marks invalid")
    return masks


def encode_weights(weights_version: int, state: dict[str, np.ndarray], run: int, env_steps: int = 0) -> list:
    """Frames of a WEIGHTS message of run ``run``: ``state``'s float32/int64 arrays by name and the run's ``env_steps``."""
    names = list(state)
    arrays = [np.require(state[n], requirements="C") for n in names]  # keeps 0-d arrays 0-d
    for name, arr in zip(names, arrays):
        if arr.dtype.str not in WEIGHT_DTYPES:
            raise ValueError(f"weight {name} has dtype {arr.dtype}, expected one of {sorted(WEIGHT_DTYPES)}")
    header = {
        "v": VERSION,
        "kind": KIND_WEIGHTS,
        "run": int(run),
        "wv": int(weights_version),
        "es": int(env_steps),
        "names": names,
        "dtypes": [a.dtype.str for a in arrays],
        "shapes": [list(a.shape) for a in arrays],
    }
    return [msgpack.packb(header, use_bin_type=True), *arrays]


def decode_weights(parts: Sequence[Any], expected: dict[str, tuple[tuple[int, ...], str]]) -> tuple[int, int, dict, int]:
    """Decode WEIGHTS against ``expected`` {name: (shape, dtype str)}: (run, weights_version, arrays, the run's env steps,
    0 when not sent). Another protocol version is a ProtocolError of reason "version" naming both."""
    if not parts:
        raise ProtocolError("frame_count", f"0 frames, expected {1 + len(expected)}")
    header = _unpackb(parts[0], max_array_len=4 * len(expected) + 16)
    if isinstance(header, dict) and header.get("v") != VERSION:
        raise ProtocolError("version", f"version {header.get('v')!r}, expected {VERSION}")
    if not isinstance(header, dict) or header.get("kind") != KIND_WEIGHTS:
        raise ProtocolError("kind", "not a WEIGHTS message of this protocol version")
    if len(parts) != 1 + len(expected):
        raise ProtocolError("frame_count", f"{len(parts)} frames, expected {1 + len(expected)}")
    env_steps = header.get("es", 0)  # optional: 0 when absent
    for key, value, low in (("wv", header.get("wv"), 0), ("run", header.get("run"), 1), ("es", env_steps, 0)):
        if type(value) is not int or not low <= value <= _INT64_MAX:
            raise ProtocolError("field", f"{key}={value!r}")
    names, dtypes, shapes = header.get("names"), header.get("dtypes"), header.get("shapes")
    if names != list(expected) or not isinstance(dtypes, list) or not isinstance(shapes, list):
        raise ProtocolError("field", "weight names differ from this network's")
    out = {}
    for name, dtype, shape, part in zip(names, dtypes, shapes, parts[1:]):
        want_shape, want_dtype = expected[name]
        if dtype != want_dtype or shape != list(want_shape):
            raise ProtocolError("shape", f"{name}: {dtype} {shape}, expected {want_dtype} {list(want_shape)}")
        buf = memoryview(part)
        np_dtype = np.dtype(dtype)
        if buf.nbytes != int(np.prod(want_shape)) * np_dtype.itemsize:
            raise ProtocolError("size", f"{name}: {buf.nbytes} bytes")
        out[name] = np.frombuffer(buf, dtype=np_dtype).reshape(want_shape)
    return header["run"], header["wv"], out, env_steps


def new_run_id() -> int:
    """A fresh run identity for WEIGHTS and BATCH headers: 63 random bits, never 0 (0 means no weights yet)."""
    return secrets.randbits(63) or 1


def weights_endpoints(transport: Any) -> tuple[str, str]:
    """(broadcast PUB endpoint, request ROUTER endpoint) of a ``TransportConfig``: base_port - 1 and - 2."""
    host, base = transport.host, transport.base_port
    return f"tcp://{host}:{base - 1}", f"tcp://{host}:{base - 2}"


def _one_frame(header: dict) -> list:
    return [msgpack.packb(header, use_bin_type=True)]


def encode_weights_request(actor: int, incarnation: int, have: int) -> list:
    return _one_frame(
        {"v": VERSION, "kind": KIND_WEIGHTS_REQUEST, "actor": int(actor), "inc": int(incarnation), "have": int(have)}
    )


_REQUEST_KEYS: dict[Any, tuple[str, ...]] = {  # Any: looked up with whatever "kind" the header holds
    KIND_WEIGHTS_REQUEST: ("actor", "inc", "have"),
    KIND_SLOT_REQUEST: ("inc", "want", "E"),
}


def _one_frame_header(parts: Sequence[Any]) -> dict:
    if len(parts) != 1:
        raise ProtocolError("frame_count", f"{len(parts)} frames, expected 1")
    return _unpack_header(parts[0])


def decode_request(parts: Sequence[Any]) -> dict:
    """A WEIGHTS_REQUEST or SLOT_REQUEST (the learner's ROUTER takes both); ``header["kind"]`` says which."""
    header = _one_frame_header(parts)
    keys = _REQUEST_KEYS.get(header.get("kind")) if header.get("v") == VERSION else None
    if keys is None:
        raise ProtocolError("kind", "not a WEIGHTS_REQUEST or SLOT_REQUEST of this protocol version")
    if set(header) != {"v", "kind", *keys}:
        raise ProtocolError("field", f"keys {sorted(map(str, header))}")
    for key in keys:
        _int_field(header, key, -1, _INT64_MAX)
    return header


def request_version(parts: Sequence[Any]) -> int | None:
    """The protocol version of a SLOT_REQUEST or WEIGHTS_REQUEST of another version (any release's layout), else None."""
    try:
        header = _one_frame_header(parts)
    except ProtocolError:
        return None
    version = header.get("v")
    if type(version) is not int or version == VERSION or header.get("kind") not in _REQUEST_KEYS:
        return None
    return version


def encode_version_refusal(theirs: int) -> list:
    """The learner's reply to a request of version ``theirs``: its own version, in a layout every release reads."""
    return _one_frame({"kind": KIND_VERSION_REFUSED, "v": VERSION, "yours": int(theirs)})


def decode_version_refusal(parts: Sequence[Any]) -> int | None:
    """The learner's protocol version from a VERSION_REFUSED reply, else None (any other message)."""
    try:
        header = _one_frame_header(parts)
    except ProtocolError:
        return None
    version = header.get("v")
    return version if header.get("kind") == KIND_VERSION_REFUSED and type(version) is int else None


def encode_slot_request(incarnation: int, want: int, envs: int) -> list:
    return _one_frame({"v": VERSION, "kind": KIND_SLOT_REQUEST, "inc": int(incarnation), "want": int(want), "E": int(envs)})


def encode_slot(incarnation: int, slot: int, slots: int, lease: float, reason: str = "") -> list:
    header = {"v": VERSION, "kind": KIND_SLOT, "inc": int(incarnation), "slot": int(slot), "slots": int(slots)}
    return _one_frame(header | {"lease": float(lease), "reason": str(reason)[:MAX_REASON_CHARS]})


def decode_slot(parts: Sequence[Any]) -> dict:
    """The learner's SLOT reply: ``slot`` >= 0 granted, -1 refused (``reason`` says why)."""
    header = _one_frame_header(parts)
    if header.get("v") != VERSION or header.get("kind") != KIND_SLOT:
        raise ProtocolError("kind", "not a SLOT reply of this protocol version")
    if set(header) != {"v", "kind", "inc", "slot", "slots", "lease", "reason"}:
        raise ProtocolError("field", f"keys {sorted(map(str, header))}")
    _int_field(header, "inc", 0, _INT64_MAX)
    slots = _int_field(header, "slots", 1, 1 << 16)
    _int_field(header, "slot", -1, slots - 1)
    if not isinstance(header["lease"], float) or not 0 < header["lease"] < float("inf"):
        raise ProtocolError("field", f"lease={header['lease']!r}")
    if not isinstance(header["reason"], str) or len(header["reason"]) > MAX_REASON_CHARS:
        raise ProtocolError("field", "reason")
    return header
