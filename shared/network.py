"""The Q-networks: Nature-DQN convolutions with BatchNorm for frames, and the family an env spec calls for.

Convolutions carry no bias (BatchNorm's shift replaces it), ReLUs are in
place, weights use He (Kaiming) initialisation for ReLU. The input is the
uint8 frame stack [B, stack, H, W]; scaling to [0, 1] happens inside the
network so uint8 is what travels and what replay stores.

Head: dueling by default (``value`` and ``advantage`` streams, Q = V + A - mean A, Wang et al.
2016), or the Nature-DQN ``head`` with ``dueling=False``.

BatchNorm modes: actors always run the network in ``eval()`` mode (running
statistics, deterministic, works for a batch of one env).

Precision: under mixed precision (autocast bf16/fp16) the convolutions run in
the low precision, but the head (both linear layers) always runs in fp32 and
the Q-values it returns are fp32. bf16 keeps 8 bits of mantissa: Q = 800 would
be rounded to steps of 4, so near-equal action values would tie and argmax
would favour the lowest index. The actors' copies (:func:`acting_copy`) fold BatchNorm into the
layers and, with ``actor.precision bf16``, run everything in bf16 (``compute_dtype``) but each
head stream's output layer, so their Q-values are fp32 sums, off by about 0.03, without bf16's ties.

Other envs: :func:`build_q_network` picks the family from an env's
:class:`shared.spec.EnvSpec` (:func:`network_family` names it): QNetwork for square frames,
:class:`MLPQNetwork` for feature vectors, :class:`SmallConvQNetwork` for small grids and
:class:`CellQNetwork` (fully convolutional, one Q per cell) when there is one action per cell.
All share the conventions above. :func:`masked_argmax` is the argmax over valid actions of
masked envs (the TD rules that use it: shared/targets.py).
"""

from __future__ import annotations

import copy

import torch
from torch import nn


def _conv_out(size: int, kernel: int, stride: int) -> int:
    return (size - kernel) // stride + 1


# --- Building blocks shared by every family (QNetwork and the networks for other env specs) ---
#
# Every family below follows QNetwork's conventions: no bias before a BatchNorm, ReLUs in place,
# He (Kaiming) initialisation for ReLU of every Conv2d/Linear (biases zero), streams named
# ``value``/``advantage`` (dueling) or ``head``,
# and the head plus the returned Q-values in fp32 even under autocast. Input dtype: uint8 is
# scaled by 1/255 inside the network; any other dtype (float32, float16, int8) is converted to
# float32 and used as it is. Run in ``eval()`` mode for batches of one (BatchNorm's running
# statistics); train mode needs more than one value per channel, as BatchNorm always does.


def _as_float(obs: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """uint8 -> ``dtype`` (the network's compute dtype) in [0, 1]; any other dtype -> ``dtype`` unchanged in value."""
    return obs.to(dtype) / 255.0 if obs.dtype == torch.uint8 else obs.to(dtype)


def init_weights(net: nn.Module) -> None:
    """He (Kaiming) normal initialisation for ReLU of every Conv2d/Linear of ``net``, biases zero (every family's
    construction; a reset's fresh draw, learner/resets.py)."""
    for module in net.modules():
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            nn.init.kaiming_normal_(module.weight, nonlinearity="relu")
            if module.bias is not None:
                nn.init.zeros_(module.bias)


def _stream(in_features: int, hidden: int, outputs: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(in_features, hidden), nn.ReLU(inplace=True), nn.Linear(hidden, outputs))


class _DuelingHead(nn.Module):
    """Base of the flat-feature families (QNetwork included): ``features`` then the head (fp32, dueling or plain)."""

    dueling: bool
    features: nn.Module
    compute_dtype: torch.dtype = torch.float32
    """The dtype of every weight and activation: float32 (training, evaluation); bfloat16 only in
    :func:`acting_copy`'s copies. Q-values are returned in float32 either way."""

    def _make_head(self, in_features: int, hidden: int, num_actions: int, dueling: bool) -> None:
        self.dueling = dueling
        if dueling:
            self.value, self.advantage = _stream(in_features, hidden, 1), _stream(in_features, hidden, num_actions)
        else:
            self.head = _stream(in_features, hidden, num_actions)

    def _head(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(x.device.type, enabled=False):  # the head in compute_dtype, the Q-values in fp32, always
            x = x.to(self.compute_dtype)
            if not self.dueling:
                return self.head(x).float()
            advantage = self.advantage(x)
            return (self.value(x) + advantage - advantage.mean(dim=1, keepdim=True)).float()


class QNetwork(_DuelingHead):
    """Maps uint8 stacks [B, C, H, W] to Q-values [B, num_actions]."""

    def __init__(self, in_channels: int, num_actions: int, frame_size: int = 84, dueling: bool = True):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 32, kernel_size=8, stride=4, bias=False),
            nn.BatchNorm2d(32),
            nn.ReLU(inplace=True),
            nn.Conv2d(32, 64, kernel_size=4, stride=2, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(inplace=True),
            nn.Conv2d(64, 64, kernel_size=3, stride=1, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(inplace=True),
            nn.Flatten(),
        )
        side = _conv_out(_conv_out(_conv_out(frame_size, 8, 4), 4, 2), 3, 1)
        self._make_head(64 * side * side, 512, num_actions, dueling)
        init_weights(self)

    def trunk(self, obs: torch.Tensor) -> torch.Tensor:
        """The convolutional features of ``obs`` (every BatchNorm of the net lies here)."""
        if obs.dim() == 3:  # [B, H, W]: single frames (a 2-D obs spec with stack 1) are one channel
            obs = obs.unsqueeze(1)
        return self.features(obs.to(self.compute_dtype) / 255.0)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self._head(self.trunk(obs))


class MLPQNetwork(_DuelingHead):
    """Maps feature vectors [B, in_features] to Q-values [B, num_actions] (fp32).

    Trunk: ``Linear(no bias) -> BatchNorm1d -> ReLU`` per entry of ``hidden``; head: QNetwork's
    (``value``/``advantage`` streams or ``head``, each ``Linear(hidden[-1], hidden[-1]) -> ReLU ->
    Linear``), run in fp32. Input: float32 [B, F] is used as it is (any float or int8 dtype is
    converted to float32 unscaled); uint8 is scaled by 1/255. Trailing axes are flattened, so
    [B, *shape] with prod(shape) == in_features also works.
    """

    def __init__(self, in_features: int, num_actions: int, hidden: tuple[int, ...] = (256, 256), dueling: bool = True):
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]
        width = in_features
        for h in hidden:
            layers += [nn.Linear(width, h, bias=False), nn.BatchNorm1d(h), nn.ReLU(inplace=True)]
            width = h
        self.features = nn.Sequential(*layers)
        self._make_head(width, hidden[-1] if hidden else max(in_features, num_actions), num_actions, dueling)
        init_weights(self)

    def trunk(self, obs: torch.Tensor) -> torch.Tensor:
        """The features of ``obs``, before the head."""
        return self.features(_as_float(obs, self.compute_dtype))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self._head(self.trunk(obs))


def _conv_bn_relu(c_in: int, c_out: int, stride: int = 1, dilation: int = 1) -> list[nn.Module]:
    """3x3 conv that keeps the size at stride 1 (padding = dilation), no bias, BatchNorm, ReLU."""
    return [
        nn.Conv2d(c_in, c_out, 3, stride=stride, padding=dilation, dilation=dilation, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(inplace=True),
    ]


class SmallConvQNetwork(_DuelingHead):
    """Maps small grids [B, C, H, W] (e.g. Snake's 3 x 10 x 10) to Q-values [B, num_actions] (fp32).

    For inputs QNetwork cannot take (it needs square frames of at least 36 px) or where its 8x8
    stride-4 first layer would blur a grid of one pixel per cell: 3x3 convs with padding 1 (no
    bias) + BatchNorm2d + ReLU with ``channels`` filters, then flatten and QNetwork's head (fp32).
    The first conv has stride 1; a later one has stride 2 while the map's longer side is above
    ``max_side`` (10x10 and 12x12 stay at full resolution, 32x32 becomes 8x8), so the flattened
    features, and the head's first layers, stay small on bigger grids. uint8 input is scaled by
    1/255, float input used as it is.
    """

    def __init__(
        self,
        in_channels: int,
        height: int,
        width: int,
        num_actions: int,
        dueling: bool = True,
        channels: tuple[int, ...] = (32, 64, 64),
        hidden: int = 256,
        max_side: int = 12,
    ):
        super().__init__()
        layers: list[nn.Module] = []
        c, h, w = in_channels, height, width
        for i, out in enumerate(channels):
            stride = 2 if i > 0 and max(h, w) > max_side else 1
            layers += _conv_bn_relu(c, out, stride)
            c, h, w = out, (h - 1) // stride + 1, (w - 1) // stride + 1
        self.features = nn.Sequential(*layers, nn.Flatten())
        self.out_hw = (h, w)
        self._make_head(c * h * w, hidden, num_actions, dueling)
        init_weights(self)

    def trunk(self, obs: torch.Tensor) -> torch.Tensor:
        """The features of ``obs``, before the head."""
        return self.features(_as_float(obs, self.compute_dtype))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self._head(self.trunk(obs))


def cell_dilations(blocks: int, height: int, width: int, dilated: bool = True) -> tuple[int, ...]:
    """Dilation of each 3x3 conv of :class:`CellQNetwork`: 1, 2, 4, 8, ... capped at the largest
    power of two <= (max(H, W) - 1) // 2 (a wider tap would reach past the board from every cell);
    all 1 when not ``dilated``."""
    cap = 1
    while dilated and cap * 2 <= (max(height, width) - 1) // 2:
        cap *= 2
    return tuple(min(2**i, cap) for i in range(blocks))


class CellQNetwork(nn.Module):
    """One Q-value per cell: maps [B, C, H, W] to Q [B, H*W] (fp32), action = y * W + x.

    Fully convolutional, so the same weights work for any H, W, and every cell is scored by the
    same function of its neighbourhood (translation equivariant away from the borders; the zero
    padding lets cells near a border know it). ``blocks`` 3x3 convs (no bias) + BatchNorm2d + ReLU
    with ``channels`` filters, then a 1x1 conv to one channel: the advantage map (``advantage``;
    ``head`` when not dueling), row-major flattened.

    Size: 16 channels, 3 undilated blocks by default, so a cell sees the 7x7 cells around it
    (``receptive_field``): the burned map under the current breaks (an observation channel), the
    ignitions and the fuel near it. Measured here on one CPU thread over 8x32x32 fuel-break
    observations, 16-env actor batches: 64 channels with dilations 1, 2, 4, 8 cost 4.7 ms of actor
    inference per env and 1.7 s per batch-64 update; 16 channels in 4 dilated blocks 0.59 ms and
    256 ms; in another run, 4 undilated blocks 0.41 ms and 238 ms, 3 undilated 0.26 ms and 164 ms
    (on CPU PyTorch's dilated convs ran about twice as slow as plain ones of the same MACs).
    ``dilated``: the k-th conv is dilated 2**k (1, 2, 4, 8, capped for small boards,
    :func:`cell_dilations`), a wider view at the same MACs; doubling dilations after a dilation-1
    conv leave no holes in the receptive field (Yu & Koltun 2016).

    Dueling: ``value`` is global average pooling -> Linear -> 1; Q = V + A - mean over cells of A
    (both streams in fp32). uint8 input is scaled by 1/255, float input used as it is.
    """

    compute_dtype: torch.dtype = torch.float32
    """As :attr:`_DuelingHead.compute_dtype`."""

    def __init__(
        self,
        in_channels: int,
        height: int,
        width: int,
        channels: int = 16,
        blocks: int = 3,
        dueling: bool = True,
        dilated: bool = False,
    ):
        super().__init__()
        if blocks < 1:
            raise ValueError(f"blocks {blocks!r} must be >= 1")
        self.dueling = dueling
        self.height, self.width, self.num_actions = height, width, height * width
        self.dilations = cell_dilations(blocks, height, width, dilated)
        self.receptive_field = 1 + 2 * sum(self.dilations)
        layers: list[nn.Module] = []
        c = in_channels
        for d in self.dilations:
            layers += _conv_bn_relu(c, channels, dilation=d)
            c = channels
        self.features = nn.Sequential(*layers)
        if dueling:
            self.advantage = nn.Conv2d(channels, 1, kernel_size=1)
            self.value = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, 1))
        else:
            self.head = nn.Conv2d(channels, 1, kernel_size=1)
        init_weights(self)

    def trunk(self, obs: torch.Tensor) -> torch.Tensor:
        """The per-cell features of ``obs``, before the head."""
        return self.features(_as_float(obs, self.compute_dtype))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = self.trunk(obs)
        with torch.autocast(x.device.type, enabled=False):  # the head in compute_dtype, the Q-values in fp32, always
            x = x.to(self.compute_dtype)
            if not self.dueling:
                return self.head(x).flatten(1).float()
            advantage = self.advantage(x).flatten(1)
            return (self.value(x) + advantage - advantage.mean(dim=1, keepdim=True)).float()


# --- Choosing the network from an EnvSpec ------------------------------------------------------

NATURE_MIN_SIZE = 36  # the smallest square frame QNetwork's three convolutions leave a 1x1 map of


def _plan(spec, dueling: bool, frame_size: int | None) -> tuple[str, type[nn.Module], dict]:
    shape = tuple(int(d) for d in spec.obs_shape)
    if len(shape) == 1:
        if spec.stack != 1:
            raise ValueError(
                f"stack {spec.stack!r}: feature observations (obs_shape {shape}) take stack 1 "
                "(put past values into the feature vector)"
            )
        return "mlp", MLPQNetwork, dict(in_features=shape[0], num_actions=spec.num_actions, dueling=dueling)
    if len(shape) == 2:
        h, w = shape
        if h != w:
            raise ValueError(f"obs_shape {shape}: 2-D frames go to QNetwork, which needs square frames (H == W)")
        if h < NATURE_MIN_SIZE:
            raise ValueError(f"obs_shape {shape}: QNetwork needs frames of at least {NATURE_MIN_SIZE} px")
        if frame_size is not None and frame_size != h:
            raise ValueError(f"frame_size {frame_size!r} does not match obs_shape {shape}")
        return "nature", QNetwork, dict(in_channels=spec.stack, num_actions=spec.num_actions, frame_size=h, dueling=dueling)
    if len(shape) == 3:
        c, h, w = shape
        if spec.stack != 1:
            raise ValueError(
                f"stack {spec.stack!r}: (C, H, W) observations (obs_shape {shape}) take stack 1 (stack along C in the env)"
            )
        if spec.num_actions == h * w:
            return "cell", CellQNetwork, dict(in_channels=c, height=h, width=w, dueling=dueling)
        if h == w and h >= NATURE_MIN_SIZE:
            if frame_size is not None and frame_size != h:
                raise ValueError(f"frame_size {frame_size!r} does not match obs_shape {shape}")
            return "nature", QNetwork, dict(in_channels=c, num_actions=spec.num_actions, frame_size=h, dueling=dueling)
        return (
            "small_conv",
            SmallConvQNetwork,
            dict(in_channels=c, height=h, width=w, num_actions=spec.num_actions, dueling=dueling),
        )
    raise ValueError(
        f"obs_shape {shape}: no network family for {len(shape)}-D observations (1-D features, 2-D frames or 3-D (C, H, W) grids)"
    )


def network_family(spec) -> str:
    """Which family :func:`build_q_network` builds for ``spec``: "nature", "mlp", "cell" or "small_conv"."""
    return _plan(spec, True, None)[0]


def build_q_network(spec, dueling: bool = True, frame_size: int | None = None) -> nn.Module:
    """The Q-network for an env's :class:`shared.spec.EnvSpec`; it takes [B, *spec.input_shape].

    - 1-D ``obs_shape`` (F,), stack 1: :class:`MLPQNetwork` with F inputs ("mlp").
    - 2-D (H, W), square, H >= 36: :class:`QNetwork` with ``stack`` channels ("nature"); with
      stack 1 it takes [B, H, W].
    - 3-D (C, H, W), stack 1, ``num_actions == H * W``: :class:`CellQNetwork` ("cell").
    - 3-D (C, H, W), stack 1, otherwise: :class:`QNetwork` with C channels if square and >= 36 px,
      else :class:`SmallConvQNetwork` ("small_conv").

    ``frame_size``, when given, must equal the spec's frame side (a check for callers that still
    carry it in their config). Anything else raises ValueError naming the spec field or the value.
    """
    _, cls, kwargs = _plan(spec, dueling, frame_size)
    return cls(**kwargs)


def batchnorm_trunk(net: nn.Module) -> nn.Module | None:
    """The submodule (``net.features``) holding every BatchNorm of ``net``, so a pass that only moves BatchNorm's
    running statistics can stop there (``net.trunk``) and skip the head; None when some BatchNorm lies outside it."""
    features = getattr(net, "features", None)
    if not isinstance(features, nn.Module) or not callable(getattr(net, "trunk", None)):
        return None
    inside = {id(m) for m in features.modules()}
    norms = [m for m in net.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    return features if all(id(m) in inside for m in norms) else None


# --- The actors' copy: BatchNorm folded, optionally bf16 -----------------------------------------

ACTING_PRECISIONS = ("fp32", "bf16")
"""actor.precision: the dtype of the actors' copy of the network (:func:`acting_copy`)."""


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bf16 natively (AVX512-BF16 or AMX); a bf16 update measured 1.4x faster than fp32 here."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def fold_batchnorm(net: nn.Module) -> nn.Module:
    """``net`` (in eval mode) with every BatchNorm that directly follows a Conv2d or Linear inside an ``nn.Sequential``
    folded into that layer (the layer gains the bias, the BatchNorm becomes ``nn.Identity``): in eval mode the same
    function with one op fewer per layer. Changes ``net`` in place and returns it; raises ValueError in train mode,
    where BatchNorm normalises by the batch and cannot be folded."""
    if net.training:
        raise ValueError("fold_batchnorm needs a network in eval mode (train-mode BatchNorm uses batch statistics)")
    for seq in [m for m in net.modules() if isinstance(m, nn.Sequential)]:
        for i in range(1, len(seq)):
            layer, norm = seq[i - 1], seq[i]
            if isinstance(layer, nn.Conv2d) and type(norm) is nn.BatchNorm2d:
                seq[i - 1] = torch.nn.utils.fusion.fuse_conv_bn_eval(layer, norm)
            elif isinstance(layer, nn.Linear) and type(norm) is nn.BatchNorm1d:
                seq[i - 1] = torch.nn.utils.fusion.fuse_linear_bn_eval(layer, norm)
            else:
                continue
            seq[i] = nn.Identity()
    return net


def acting_copy(net: nn.Module, precision: str = "fp32") -> nn.Module:
    """An eval-mode copy of ``net`` for acting (Q-values only, no gradients): BatchNorm folded (:func:`fold_batchnorm`;
    Q equal to ``net.eval()``'s within float rounding), and with ``precision`` 'bf16' every weight and activation
    in bfloat16 but each head stream's output layer (Q off by about 0.03 on Mario's network, computed in float32). Measured on one
    CPU thread, Mario's network, per stack (docs/lab/experiments/mario.md, "Env steps per hour"): folding saves
    5-7%; bf16 halves the cost of a batch of 8 stacks and costs more than fp32 at a batch of one."""
    if precision not in ACTING_PRECISIONS:
        raise ValueError(f"precision {precision!r} must be one of {ACTING_PRECISIONS}")
    acting = fold_batchnorm(copy.deepcopy(net).eval())
    if precision == "bf16":
        acting = acting.to(torch.bfloat16)
        # compute_dtype is a plain class attribute of our nets; nn.Module's stubs only allow Tensor | Module values
        acting.compute_dtype = torch.bfloat16  # type: ignore[assignment]
        for name in ("head", "value", "advantage"):  # each stream's output layer back in fp32 (see _Fp32Output)
            stream = getattr(acting, name, None)
            if isinstance(stream, nn.Sequential):
                stream[-1] = _Fp32Output(stream[-1])
            elif stream is not None:
                setattr(acting, name, _Fp32Output(stream))
    return acting.requires_grad_(False)


class _Fp32Output(nn.Module):
    """A stream's last layer run in fp32 on bf16 features: the Q-values are then fp32 sums, not values on bf16's grid
    (steps of 1/16 at Q = 16), where near-equal actions would tie and argmax would pick the lowest index. It costs a
    [hidden x actions] product, against the [features x hidden] one that stays in bf16."""

    def __init__(self, layer: nn.Module):
        super().__init__()
        self.layer = layer.float()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x.float())


# --- Action masks --------------------------------------------------------------------------------


def masked_argmax(q: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Index of the largest ``q`` [B, A] among the valid actions, long [B, 1] (None: plain argmax).

    ``mask`` is bool [B, A], True = valid; every row has at least one valid action. An invalid
    action is never returned, however negative the valid Q-values are: invalid entries are filled
    with -inf (a large negative constant such as -1e9 would lose to valid Q-values below it), and
    if even that leaves no valid maximum (valid Q all -inf or NaN) the first valid action is
    returned. Ties go to the lowest index, as ``argmax`` does. No data-dependent control flow, so
    it can run inside torch.compile and CUDA graphs.

    Double DQN with masks: ``best = masked_argmax(online(s'), mask(s'))`` then
    ``target(s').gather(1, best)`` (shared/targets.py ``double_q_bootstrap``).
    """
    if mask is None:
        return q.argmax(dim=1, keepdim=True)
    if mask.shape != q.shape:
        raise ValueError(f"mask shape {tuple(mask.shape)} does not match q shape {tuple(q.shape)}")
    mask = mask.bool()
    filled = q.masked_fill(~mask, float("-inf"))
    at_max = mask & (filled == filled.max(dim=1, keepdim=True).values)
    rank = mask.to(torch.uint8) + at_max.to(torch.uint8)  # 2: a valid maximum, 1: valid, 0: invalid
    return rank.argmax(dim=1, keepdim=True)
