"""FrameReplay: a pre-allocated observation ring on a torch device.

Slot k of a stream (one per actor env) holds frame[k], the observation action[k] was chosen at, reward[k], terminated[k],
first[k] (a reset frame) and, masked, mask[k]; no terminal frame is stored, so a truncation is terminated[k]=0 followed
by first[k+1]=1. A stack repeats the episode's first frame before it (gym FrameStack). An n-step sample at slot i adds
gamma**k * reward[i+k] until a step with no successor or after a termination (L steps); discount = 0 after a
termination, else gamma**L; next_obs = the stack of slot i + L. Each stream is a ring of capacity // num_streams slots;
draws are made on the host from mirrors of the episode flags, and a stream not written while ``capacity`` transitions
went to the others expires, so a dead actor's play is not sampled forever.
"""

from __future__ import annotations

import threading
from typing import Any, cast

import numpy as np
import torch

from shared.spec import OBS_DTYPES as SPEC_OBS_DTYPES

_MAX_RESAMPLE_ROUNDS = 32
OBS_DTYPES = {name: getattr(torch, name) for name in SPEC_OBS_DTYPES}  # numpy name -> torch dtype
MAX_OBS_DIMS = 4


def action_storage(num_actions: int) -> torch.dtype:
    """uint8 up to 256 actions, int16 up to 32,768, else int32."""
    return torch.uint8 if num_actions <= 256 else torch.int16 if num_actions <= 1 << 15 else torch.int32


def unpack_masks(packed: torch.Tensor, num_actions: int) -> torch.Tensor:
    """bool [..., A] from packed uint8 [..., ceil(A/8)] (np.packbits little bit order)."""
    bits = torch.arange(8, dtype=torch.uint8, device=packed.device)
    out = (packed.unsqueeze(-1) >> bits).bitwise_and_(1).bool()
    return out.flatten(-2)[..., :num_actions]


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


def _is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _as_tensor(name: str, x: Any) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x
    _check(isinstance(x, np.ndarray), f"{name} must be a numpy array or torch tensor, got {type(x).__name__}")
    try:
        return torch.as_tensor(x)
    except TypeError:
        raise ValueError(f"{name} has unsupported dtype {x.dtype}") from None


class FrameReplay:
    """Uniform n-step replay over per-stream observation rings (module docstring); ``frame_shape``: the spec's ``obs_shape``."""

    def __init__(
        self,
        num_streams: int,
        capacity: int,
        frame_shape: tuple[int, ...] = (84, 84),
        stack: int = 4,
        n_step: int = 3,
        gamma: float = 0.99,
        device: str | torch.device = "cpu",
        obs_dtype: str = "uint8",
        num_actions: int = 256,
        masked: bool = False,
    ):
        for name, value in (("num_streams", num_streams), ("capacity", capacity), ("stack", stack), ("n_step", n_step)):
            _check(_is_int(value) and value >= 1, f"{name}={value!r} must be an int >= 1")
        _check(isinstance(gamma, (int, float)) and 0.0 < gamma <= 1.0, f"gamma={gamma!r} must be in (0, 1]")
        shape_ok = isinstance(frame_shape, (tuple, list)) and 1 <= len(frame_shape) <= MAX_OBS_DIMS
        _check(
            shape_ok and all(_is_int(v) and v >= 1 for v in frame_shape),
            f"frame_shape={frame_shape!r} must be 1 to {MAX_OBS_DIMS} ints >= 1 (the observation's shape)",
        )
        _check(obs_dtype in OBS_DTYPES, f"obs_dtype={obs_dtype!r} must be one of {sorted(OBS_DTYPES)}")
        _check(_is_int(num_actions) and 1 <= num_actions <= 1 << 16, f"num_actions={num_actions!r} must be an int in [1, 65536]")
        per_stream = capacity // num_streams
        _check(
            per_stream >= stack + n_step + 1,
            f"capacity={capacity} over num_streams={num_streams} gives {per_stream} slots per stream; "
            f"need >= stack + n_step + 1 = {stack + n_step + 1}",
        )

        self.num_streams = int(num_streams)
        self.beta = 1.0  # PrioritizedReplay's importance-sampling exponent (anneal); uniform draws ignore it
        self.stream_capacity = int(per_stream)
        self.capacity = self.num_streams * self.stream_capacity
        self.frame_shape = tuple(int(v) for v in frame_shape)
        self.obs_dtype = OBS_DTYPES[obs_dtype]
        self.num_actions, self.masked = int(num_actions), bool(masked)
        self.mask_bytes = (self.num_actions + 7) // 8 if self.masked else 0
        self.stack, self.n_step, self.gamma = int(stack), int(n_step), float(gamma)
        self.device = torch.device(device)

        S, C, dev = self.num_streams, self.stream_capacity, self.device
        self._frames = torch.zeros((S, C, *self.frame_shape), dtype=self.obs_dtype, device=dev)
        self._actions = torch.zeros((S, C), dtype=action_storage(self.num_actions), device=dev)
        self._masks = torch.zeros((S, C, self.mask_bytes), dtype=torch.uint8, device=dev) if self.masked else None
        self._rewards = torch.zeros((S, C), dtype=torch.float32, device=dev)
        self._terminated = torch.zeros((S, C), dtype=torch.bool, device=dev)
        self._first = torch.zeros((S, C), dtype=torch.bool, device=dev)
        # host mirrors of the episode flags: draws are checked on the host, so sampling never waits for the device
        self._terminated_host, self._first_host = np.zeros((S, C), dtype=bool), np.zeros((S, C), dtype=bool)
        self._head = np.zeros(S, dtype=np.int64)
        self._written = 0  # slots written to all streams, ever
        self._last_write = np.zeros(S, dtype=np.int64)  # _written after each stream's latest add
        self._lock = threading.Lock()
        self._offsets = torch.arange(self.n_step + 1, device=dev)
        self._powers = (self.gamma ** torch.arange(self.n_step + 1, dtype=torch.float64)).to(dev, torch.float32)

    def add(
        self,
        stream0: int,
        frames: Any,
        actions: Any,
        rewards: Any,
        terminated: Any,
        first: Any,
        priorities: Any = None,
        masks: Any = None,
    ) -> None:
        """Append T slots to streams stream0..stream0+E-1: frames [E, T, *obs_shape], the rest [E, T]; ``masks`` packed uint8
        [E, T, ceil(A/8)] or bool [E, T, A]; ``priorities`` (float [E, T], >= 0) for :class:`PrioritizedReplay` only."""
        priorities = self._checked_priorities(priorities, actions)
        S, C = self.num_streams, self.stream_capacity
        if isinstance(actions, np.ndarray) and actions.dtype == np.uint16:  # torch has few uint16 kernels
            actions = actions.astype(np.int32)
        given = {"frames": frames, "actions": actions, "rewards": rewards, "terminated": terminated, "first": first}
        tensors = {name: _as_tensor(name, x) for name, x in given.items()}
        frames, actions, rewards, terminated, first = tensors.values()

        _check(
            frames.dim() == 2 + len(self.frame_shape) and tuple(frames.shape[2:]) == self.frame_shape,
            f"frames shape {tuple(frames.shape)} must be [E, T, {', '.join(map(str, self.frame_shape))}]",
        )
        E, T = int(frames.shape[0]), int(frames.shape[1])
        _check(E >= 1 and T >= 1, f"frames shape {tuple(frames.shape)} must have E >= 1 and T >= 1")
        _check(T <= C, f"T={T} exceeds the per-stream capacity C={C}")
        _check(
            _is_int(stream0) and 0 <= stream0 and stream0 + E <= S,
            f"stream0={stream0!r} with E={E} streams is out of range for num_streams={S}",
        )
        for name, x in list(tensors.items())[1:]:
            _check(tuple(x.shape) == (E, T), f"{name} shape {tuple(x.shape)} must be [E, T] = [{E}, {T}]")
        _check(frames.dtype == self.obs_dtype, f"frames dtype {frames.dtype} must be {self.obs_dtype}")
        int_action = not (actions.is_floating_point() or actions.is_complex() or actions.dtype == torch.bool)
        _check(int_action, f"actions dtype {actions.dtype} must be an integer type")
        _check(rewards.is_floating_point(), f"rewards dtype {rewards.dtype} must be floating point")
        _check(terminated.dtype == torch.bool, f"terminated dtype {terminated.dtype} must be bool")
        _check(first.dtype == torch.bool, f"first dtype {first.dtype} must be bool")
        if actions.dtype == torch.uint8:  # never negative: one reduction (Mario's path)
            a_max = int(actions.max()) if self.num_actions < 256 else 0
            _check(a_max < self.num_actions, f"actions must be in [0, {self.num_actions}), got max={a_max}")
        else:
            a_min, a_max = int(actions.min()), int(actions.max())
            _check(
                a_min >= 0 and a_max < self.num_actions,
                f"actions must be in [0, {self.num_actions}), got min={a_min} max={a_max}",
            )
        if self.masked:
            _check(masks is not None, "masks are required: this replay's env is masked")
            if isinstance(masks, np.ndarray) and masks.dtype == np.bool_:
                _check(
                    masks.shape == (E, T, self.num_actions),
                    f"masks shape {masks.shape} must be [E, T, A] = [{E}, {T}, {self.num_actions}]",
                )
                masks = np.packbits(masks, axis=-1, bitorder="little")
            masks = _as_tensor("masks", masks)
            _check(
                masks.dtype == torch.uint8 and tuple(masks.shape) == (E, T, self.mask_bytes),
                f"masks {masks.dtype} {tuple(masks.shape)} must be packed uint8 [{E}, {T}, {self.mask_bytes}]",
            )
        else:
            _check(masks is None, "masks given, but this replay's env is not masked")

        # transfers and casts outside the lock (on a GPU from pinned memory, ordered before the ring's later reads)
        dev = self.device
        fields: list[tuple[Any, Any]] = [  # (ring, what goes into it): device tensors, then the host mirrors
            (self._frames, to_device(frames, dev)),
            (self._actions, to_device(actions, dev, self._actions.dtype)),
            (self._rewards, to_device(rewards, dev, torch.float32)),
            (self._terminated, to_device(terminated, dev)),
            (self._first, to_device(first, dev)),
        ]
        if self.masked:
            fields.append((self._masks, to_device(masks, dev)))
        fields += [(self._terminated_host, host_array(terminated)), (self._first_host, host_array(first))]
        rows = slice(stream0, stream0 + E)
        with self._lock:
            heads = self._head[rows]
            _check(
                bool((heads == heads[0]).all()),
                f"stream0={stream0}: streams {stream0}..{stream0 + E - 1} must advance in lockstep, "
                f"but their heads are {heads.tolist()}",
            )
            pos = int(heads[0]) % C
            n1 = min(T, C - pos)
            for dst, src in fields:
                dst[rows, pos : pos + n1] = src[:, :n1]
                if n1 < T:
                    dst[rows, : T - n1] = src[:, n1:]
            self._written_hook(stream0, E, int(heads[0]), T, priorities)
            self._head[rows] += T
            self._written += E * T
            self._last_write[rows] = self._written

    def _checked_priorities(self, priorities: Any, actions: Any) -> Any:
        """``add``'s priorities, checked before anything is written (PrioritizedReplay's; uniform draws ignore them)."""
        return priorities

    def anneal(self, env_steps: int) -> None:
        """Set what depends on the run's env steps: nothing for uniform draws (PrioritizedReplay: its beta)."""

    def sample(
        self, batch_size: int, generator: torch.Generator | None = None, beta: float | None = None
    ) -> dict[str, torch.Tensor]:
        """Draw batch_size valid n-step transitions uniformly (``generator``: a CPU one); ``beta``: PrioritizedReplay's."""
        _check(_is_int(batch_size) and batch_size >= 1, f"batch_size={batch_size!r} must be an int >= 1")
        B, C, shape = int(batch_size), self.stream_capacity, self.frame_shape
        with self._lock:
            lo, counts = self._ranges(self._head)
            total = int(counts.sum())
            _check(
                total > 0,
                f"nothing to sample yet: a stream needs at least n_step + 1 = {self.n_step + 1} "
                f"slots, heads are {self._head.tolist()}",
            )
            draw = self._draw(lo, counts, generator)
            stream_h, slot_h = draw(B)  # host int64 arrays
            first_w, term_w = self._host_windows(stream_h, slot_h)
            include_h = _include(first_w, term_w)
            for _ in range(_MAX_RESAMPLE_ROUNDS):
                bad = np.flatnonzero(~include_h.any(1))  # the host's mirrors: no wait for the device
                if bad.size == 0:
                    break
                stream_h[bad], slot_h[bad] = draw(int(bad.size))
                f2, t2 = self._host_windows(stream_h[bad], slot_h[bad])
                term_w[bad], include_h[bad] = t2, _include(f2, t2)
            else:
                raise RuntimeError(
                    f"sample: {bad.size} of {B} draws still have no successor step after "
                    f"{_MAX_RESAMPLE_ROUNDS} redraws; almost every sampleable slot is a truncation"
                )
            steps_h = include_h.sum(1)
            done_h = (include_h & term_w).any(1)
            # the draw, its steps and flags to the device in one transfer
            packed = np.concatenate([np.stack([stream_h, slot_h, steps_h, done_h], 1), include_h], 1).astype(np.int64)
            on_device = to_device(torch.from_numpy(packed), self.device)
            stream, slot, steps = (on_device[:, j].contiguous() for j in range(3))
            done, include = on_device[:, 3].bool(), on_device[:, 4:].bool()
            flat_w = stream[:, None] * C + (slot[:, None] + self._offsets[: self.n_step]) % C
            rew_w = self._rewards.view(-1)[flat_w]
            # the stacks of slot i and of the bootstrap's slot i + L: two per sample
            at = torch.stack([slot, slot + steps], 1)  # [B, 2]
            kstream = stream[:, None].expand(B, 2).reshape(-1)
            stack_idx = self._stack_indices(kstream, at.reshape(-1))
            flat = kstream[:, None] * C + stack_idx % C
            frames = self._frames.view(-1, *shape).index_select(0, flat.view(-1))
            frames = frames.view(B, 2, *shape) if self.stack == 1 else frames.view(B, 2, self.stack, *shape)
            action = self._actions.view(-1)[stream * C + slot % C].long()
            extra_mask = {}
            if self.masked:  # the masks of slot i (Munchausen's log-policy at s) and of the bootstrap's slot i + L
                packed = cast("torch.Tensor", self._masks).view(-1, self.mask_bytes).index_select(0, flat[:, -1])
                masks = unpack_masks(packed, self.num_actions).view(B, 2, self.num_actions)
                extra_mask = {"mask": masks[:, 0], "next_mask": masks[:, 1]}
            extra = self._sampled(stream_h, slot_h, counts, self.beta if beta is None else beta)

        reward = (rew_w * self._powers[: self.n_step] * include).sum(1)
        discount = torch.where(done, torch.zeros_like(reward), self._powers[steps])
        return {
            "obs": frames[:, 0],
            "action": action,
            "reward": reward,
            "discount": discount,
            "next_obs": frames[:, 1],
            "stream": stream,
            "slot": slot,
            "host_stream": torch.from_numpy(stream_h),  # the same on the host, for the priority write-back
            "host_slot": torch.from_numpy(slot_h),
            **extra_mask,
            **extra,
        }

    def stack_at(self, stream: int, abs_slot: int) -> torch.Tensor:
        """The network input of a retained slot ([stack, *obs_shape]; [*obs_shape] at stack 1); ValueError if overwritten."""
        _check(
            _is_int(stream) and 0 <= stream < self.num_streams,
            f"stream={stream!r} is out of range for num_streams={self.num_streams}",
        )
        _check(_is_int(abs_slot), f"abs_slot={abs_slot!r} must be an int")
        C = self.stream_capacity
        with self._lock:
            h = int(self._head[stream])
            oldest = max(0, h - C)
            _check(
                oldest <= abs_slot < h, f"abs_slot={abs_slot} is not retained in stream {stream} (retained: {oldest}..{h - 1})"
            )
            s = torch.tensor([stream], device=self.device)
            idx = self._stack_indices(s, torch.tensor([abs_slot], device=self.device))[0]
            need = int(idx.min())
            _check(
                need >= oldest,
                f"abs_slot={abs_slot}: its stack needs slot {need} of stream {stream}, "
                f"already overwritten (oldest retained: {oldest})",
            )
            out = self._frames[stream, idx % C]
            return out[0] if self.stack == 1 else out

    def slot_data(self, stream: int, abs_slot: int) -> dict[str, Any]:
        """The stored fields of one retained slot, as Python values (for tests and debugging)."""
        C = self.stream_capacity
        with self._lock:
            h = int(self._head[stream])
            _check(max(0, h - C) <= abs_slot < h, f"abs_slot={abs_slot} is not retained in stream {stream}")
            k = abs_slot % C
            out = {
                "frame": self._frames[stream, k].clone(),
                "action": int(self._actions[stream, k]),
                "reward": float(self._rewards[stream, k]),
                "terminated": bool(self._terminated[stream, k]),
                "first": bool(self._first[stream, k]),
            }
            if self.masked:
                out["mask"] = unpack_masks(cast("torch.Tensor", self._masks)[stream, k], self.num_actions).clone()
            return out

    def __len__(self) -> int:
        return int(np.minimum(self.heads, self.stream_capacity).sum())

    def layout(self) -> dict[str, Any]:
        """What a saved replay must match to be loaded here: streams, their capacity, what a slot holds."""
        return {
            "kind": type(self).__name__,
            "num_streams": self.num_streams,
            "stream_capacity": self.stream_capacity,
            "frame_shape": list(self.frame_shape),
            "obs_dtype": str(self.obs_dtype),
            "num_actions": self.num_actions,
            "masked": self.masked,
        }

    def saved_arrays(self) -> dict[str, torch.Tensor | np.ndarray]:
        """What a saved replay holds (learner/replay/saved.py) by name: this replay's own rings and host arrays, not copies;
        read or fill them only under ``_lock``. The host mirrors of the flags are not among them: ``restored`` rebuilds them."""
        return {**self._rings(), "head": self._head, "last_write": self._last_write}

    def saved_scalars(self) -> dict[str, float]:
        """The numbers a saved replay holds beside its arrays (read under ``_lock``)."""
        return {"written": self._written}

    def restored(self, scalars: dict[str, float]) -> None:
        """Under ``_lock``, once ``saved_arrays`` hold a saved replay's content: its ``scalars`` set, what derives from them
        rebuilt (the host mirrors of the flags; PrioritizedReplay: its sum tree)."""
        self._written = int(scalars["written"])
        self._terminated_host[:] = host_array(self._terminated)
        self._first_host[:] = host_array(self._first)

    def num_sampleable(self) -> int:
        return int(self._ranges(self.heads)[1].sum())

    def live_streams(self) -> int:
        """Streams that hold data and have not expired (module docstring)."""
        with self._lock:
            return int(((self._head > 0) & ~self._expired()).sum())

    @property
    def heads(self) -> np.ndarray:
        with self._lock:
            return self._head.copy()

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self._rings().values())

    def _rings(self) -> dict[str, torch.Tensor]:
        """The device rings by name (a saved replay's files): masks only when masked."""
        rings = {name: getattr(self, f"_{name}") for name in ("frames", "actions", "rewards", "terminated", "first", "masks")}
        return {name: ring for name, ring in rings.items() if ring is not None}

    @property
    def bytes_per_transition(self) -> int:
        return self.nbytes // self.capacity

    def _draw(self, lo: np.ndarray, counts: np.ndarray, generator: torch.Generator | None):
        """Uniform draws over the sampleable slots: flat indices mapped to (stream, slot) by searchsorted, on the host."""
        lo, counts = lo.astype(np.int64), counts.astype(np.int64)
        cum = np.cumsum(counts)

        def draw(k: int) -> tuple[np.ndarray, np.ndarray]:
            u = torch.randint(int(cum[-1]), (k,), generator=generator).numpy()
            stream = np.searchsorted(cum, u, side="right")
            slot = lo[stream] + u - (cum[stream] - counts[stream])
            return stream.astype(np.int64), slot.astype(np.int64)

        return draw

    def _sampled(self, stream: np.ndarray, slot: np.ndarray, counts: np.ndarray, beta: float) -> dict:
        """Extra fields of a sample (under the lock) from its host (stream, slot); uniform draws add none."""
        return {}

    def _written_hook(self, stream0: int, E: int, head: int, T: int, priorities: Any) -> None:
        """Called under the lock after T slots from absolute slot ``head`` were written to streams stream0..+E-1."""

    def _ranges(self, heads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per stream: the lowest sampleable absolute slot and the number of sampleable slots."""
        C = self.stream_capacity
        lo = np.where(heads > C, heads - C + self.stack - 1, 0)
        hi = heads - 1 - self.n_step
        return lo, np.where(self._expired(), 0, np.maximum(hi - lo + 1, 0))

    def _expired(self) -> np.ndarray:
        """Per stream: more than ``capacity`` slots were written elsewhere since its last write."""
        return self._written - self._last_write > self.capacity

    def _host_windows(self, stream: np.ndarray, slot: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """first [B, n+1] and terminated [B, n] of slots slot..slot+n, from the host mirrors."""
        C, n = self.stream_capacity, self.n_step
        flat = stream[:, None] * C + (slot[:, None] + np.arange(n + 1)) % C
        return self._first_host.reshape(-1)[flat], self._terminated_host.reshape(-1)[flat[:, :n]]

    def _stack_indices(self, stream: torch.Tensor, slot: torch.Tensor) -> torch.Tensor:
        """[B, stack] absolute slots of the frames stacked for each (stream, slot), oldest first."""
        C, first = self.stream_capacity, self._first.view(-1)
        base = stream * C
        cur, cols = slot, [slot]
        for _ in range(self.stack - 1):
            stay = first[base + cur % C] | (cur == 0)
            cur = torch.where(stay, cur, cur - 1)
            cols.append(cur)
        return torch.stack(cols[::-1], 1)


def _include(first_w: np.ndarray, term_w: np.ndarray) -> np.ndarray:
    """[B, n] mask of the steps the n-step return adds (a prefix of the window), from first [B, n+1], terminated [B, n]."""
    ok = term_w | ~first_w[:, 1:]  # the step has a successor frame or terminates
    go_on = ok & ~term_w  # the return continues after the step
    before = np.concatenate([np.ones_like(go_on[:, :1]), go_on[:, :-1]], 1)
    return ok & np.logical_and.accumulate(before, axis=1)


def host_array(x: torch.Tensor) -> np.ndarray:
    """A host numpy view of ``x`` (replay's inputs arrive from the wire as host arrays; sampled indices have host copies)."""
    return x.numpy() if x.device.type == "cpu" else x.cpu().numpy()


def to_device(x: torch.Tensor, device: torch.device, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``x`` on ``device`` (as ``dtype``): from pinned memory without waiting on a GPU; a no-op copy on the CPU."""
    if device.type == "cuda" and x.device.type == "cpu":
        return x.pin_memory().to(device, dtype, non_blocking=True)
    return x.to(device, dtype)
