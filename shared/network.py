"""The Q-networks: Nature-DQN convolutions with BatchNorm for frames, and the family an env spec calls for.

Every family: no bias before a BatchNorm, ReLUs in place, He initialisation; uint8 input is scaled to [0, 1] inside the
network, other dtypes are used as they are. Heads are dueling (``value``/``advantage``, Q = V + A - mean A) or a plain
``head``, and run in fp32 even under autocast, so near-equal actions do not tie on bf16's grid. Actors run ``eval()`` mode.
"""

from __future__ import annotations

import copy

import torch
from torch import nn


def _as_float(obs: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """uint8 -> ``dtype`` (the network's compute dtype) in [0, 1]; any other dtype -> ``dtype`` unchanged in value."""
    return obs.to(dtype) / 255.0 if obs.dtype == torch.uint8 else obs.to(dtype)


def init_weights(net: nn.Module) -> None:
    """He (Kaiming) normal initialisation for ReLU of every Conv2d/Linear of ``net``, biases zero (also a reset's draw)."""
    for module in net.modules():
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            nn.init.kaiming_normal_(module.weight, nonlinearity="relu")
            if module.bias is not None:
                nn.init.zeros_(module.bias)


def _stream(in_features: int, hidden: int, outputs: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(in_features, hidden), nn.ReLU(inplace=True), nn.Linear(hidden, outputs))


class _DuelingHead(nn.Module):
    """Base of every family: ``features`` then the head (fp32, dueling or plain)."""

    dueling: bool
    features: nn.Module
    head: nn.Module  # a plain head, or
    value: nn.Module  # a dueling head's two streams
    advantage: nn.Module
    compute_dtype: torch.dtype = torch.float32
    """The dtype of weights and activations: bfloat16 only in :func:`acting_copy`'s copies; Q-values are float32."""

    def _make_head(self, in_features: int, hidden: int, num_actions: int, dueling: bool) -> None:
        self.dueling = dueling
        if dueling:
            self.value, self.advantage = _stream(in_features, hidden, 1), _stream(in_features, hidden, num_actions)
        else:
            self.head = _stream(in_features, hidden, num_actions)

    def _head(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(x.device.type, enabled=False):  # the head in compute_dtype, the Q-values in fp32, always
            x = x.to(self.compute_dtype)
            if not self.dueling:  # flatten(1): a cell head's [B, 1, H, W] map is [B, H*W]; flat heads stay as they are
                return self.head(x).flatten(1).float()
            advantage = self.advantage(x).flatten(1)
            return (self.value(x) + advantage - advantage.mean(dim=1, keepdim=True)).float()

    def trunk(self, obs: torch.Tensor) -> torch.Tensor:
        """The features of ``obs``, before the head."""
        return self.features(_as_float(obs, self.compute_dtype))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self._head(self.trunk(obs))


class QNetwork(_DuelingHead):
    """Maps uint8 stacks [B, C, H, W] to Q-values [B, num_actions]."""

    def __init__(self, in_channels: int, num_actions: int, frame_size: int = 84, dueling: bool = True):
        super().__init__()
        layers: list[nn.Module] = []
        c, side = in_channels, frame_size
        for out, kernel, stride in ((32, 8, 4), (64, 4, 2), (64, 3, 1)):
            layers += [nn.Conv2d(c, out, kernel, stride, bias=False), nn.BatchNorm2d(out), nn.ReLU(inplace=True)]
            c, side = out, (side - kernel) // stride + 1
        self.features = nn.Sequential(*layers, nn.Flatten())
        self._make_head(64 * side * side, 512, num_actions, dueling)
        init_weights(self)

    def trunk(self, obs: torch.Tensor) -> torch.Tensor:
        """The convolutional features of ``obs`` (every BatchNorm of the net lies here)."""
        if obs.dim() == 3:  # [B, H, W]: single frames (a 2-D obs spec with stack 1) are one channel
            obs = obs.unsqueeze(1)
        return self.features(obs.to(self.compute_dtype) / 255.0)


class MLPQNetwork(_DuelingHead):
    """Maps feature vectors [B, in_features] (trailing axes flattened) to Q-values [B, num_actions]: ``Linear -> BatchNorm1d
    -> ReLU`` per entry of ``hidden``, then QNetwork's head with streams of ``hidden[-1]`` units."""

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


def _conv_bn_relu(c_in: int, c_out: int, stride: int = 1, dilation: int = 1) -> list[nn.Module]:
    """3x3 conv that keeps the size at stride 1 (padding = dilation), no bias, BatchNorm, ReLU."""
    return [
        nn.Conv2d(c_in, c_out, 3, stride=stride, padding=dilation, dilation=dilation, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(inplace=True),
    ]


class SmallConvQNetwork(_DuelingHead):
    """Maps small grids [B, C, H, W] (Snake's 3 x 10 x 10), which QNetwork's 8x8 stride-4 layer would blur, to Q-values:
    3x3 convs (``channels``), stride 2 after the first while the map's longer side is above ``max_side`` (32x32 becomes
    8x8, so the head stays small), then QNetwork's head."""

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


def cell_dilations(blocks: int, height: int, width: int, dilated: bool = True) -> tuple[int, ...]:
    """Dilation of each 3x3 conv of :class:`CellQNetwork`: 1, 2, 4, ... capped at the largest power of two <= (max(H, W) - 1)
    // 2 (a wider tap would reach past the board from every cell); all 1 when not ``dilated``."""
    cap = 1
    while dilated and cap * 2 <= (max(height, width) - 1) // 2:
        cap *= 2
    return tuple(min(2**i, cap) for i in range(blocks))


class CellQNetwork(_DuelingHead):
    """One Q-value per cell, [B, C, H, W] -> [B, H*W] (fp32), action = y * W + x: fully convolutional, ``blocks`` 3x3 convs
    (3 x 16 see 7x7 cells) then a 1x1 conv to the advantage (or ``head``) map; ``value``: average pooling -> Linear.
    ``dilated`` widens the view at the same MACs (:func:`cell_dilations`)."""

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


# --- Choosing the network from an EnvSpec ------------------------------------------------------

NATURE_MIN_SIZE = 36  # the smallest square frame QNetwork's three convolutions leave a 1x1 map of


def _plan(spec, dueling: bool, frame_size: int | None) -> tuple[str, type[nn.Module], dict]:
    shape = tuple(int(d) for d in spec.obs_shape)
    head = dict(num_actions=spec.num_actions, dueling=dueling)
    if len(shape) not in (1, 2, 3):
        raise ValueError(
            f"obs_shape {shape}: no network family for {len(shape)}-D observations "
            "(1-D features, 2-D frames or 3-D (C, H, W) grids)"
        )
    if len(shape) == 1:
        if spec.stack != 1:
            raise ValueError(
                f"stack {spec.stack!r}: feature observations (obs_shape {shape}) take stack 1 "
                "(put past values into the feature vector)"
            )
        return "mlp", MLPQNetwork, dict(in_features=shape[0], **head)
    if len(shape) == 2:
        h, w = shape
        c = spec.stack
        if h != w:
            raise ValueError(f"obs_shape {shape}: 2-D frames go to QNetwork, which needs square frames (H == W)")
        if h < NATURE_MIN_SIZE:
            raise ValueError(f"obs_shape {shape}: QNetwork needs frames of at least {NATURE_MIN_SIZE} px")
    else:
        c, h, w = shape
        if spec.stack != 1:
            raise ValueError(
                f"stack {spec.stack!r}: (C, H, W) observations (obs_shape {shape}) take stack 1 (stack along C in the env)"
            )
        if spec.num_actions == h * w:
            return "cell", CellQNetwork, dict(in_channels=c, height=h, width=w, dueling=dueling)
        if h != w or h < NATURE_MIN_SIZE:
            return "small_conv", SmallConvQNetwork, dict(in_channels=c, height=h, width=w, **head)
    if frame_size is not None and frame_size != h:
        raise ValueError(f"frame_size {frame_size!r} does not match obs_shape {shape}")
    return "nature", QNetwork, dict(in_channels=c, frame_size=h, **head)


def network_family(spec) -> str:
    """Which family :func:`build_q_network` builds for ``spec``: "nature", "mlp", "cell" or "small_conv"."""
    return _plan(spec, True, None)[0]


def build_q_network(spec, dueling: bool = True, frame_size: int | None = None) -> nn.Module:
    """The Q-network for an env's :class:`shared.spec.EnvSpec`, taking [B, *spec.input_shape]: MLPQNetwork for (F,)
    features, QNetwork for square frames of >= 36 px, CellQNetwork for (C, H, W) with one action per cell, else
    SmallConvQNetwork. ``frame_size``, when given, must be the spec's frame side; anything else is a ValueError."""
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
    """Whether this CPU computes bf16 natively (AVX512-BF16 or AMX)."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def fold_batchnorm(net: nn.Module) -> nn.Module:
    """``net`` (eval mode) with each BatchNorm that follows a Conv2d or Linear in an ``nn.Sequential`` folded into that layer
    (then ``nn.Identity``): the same function, one op fewer per layer. In place; ValueError in train mode."""
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
    """An eval-mode copy of ``net`` for acting, no gradients, BatchNorm folded; with ``precision`` 'bf16' all in bfloat16
    but each head stream's output layer."""
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
    """A stream's last layer run in fp32 on bf16 features, so Q-values are fp32 sums and near-equal actions do not tie."""

    def __init__(self, layer: nn.Module):
        super().__init__()
        self.layer = layer.float()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x.float())


# --- Action masks --------------------------------------------------------------------------------


def masked_argmax(q: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Index of the largest ``q`` [B, A] among the valid actions (``mask`` bool [B, A], None: all), long [B, 1]: never an
    invalid one (with no valid maximum, -inf or NaN, the first valid), ties to the lowest; runs in torch.compile graphs."""
    if mask is None:
        return q.argmax(dim=1, keepdim=True)
    if mask.shape != q.shape:
        raise ValueError(f"mask shape {tuple(mask.shape)} does not match q shape {tuple(q.shape)}")
    mask = mask.bool()
    filled = q.masked_fill(~mask, float("-inf"))
    at_max = mask & (filled == filled.max(dim=1, keepdim=True).values)
    rank = mask.to(torch.uint8) + at_max.to(torch.uint8)  # 2: a valid maximum, 1: valid, 0: invalid
    return rank.argmax(dim=1, keepdim=True)
