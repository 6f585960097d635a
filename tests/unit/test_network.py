"""shared/network.py: the factory that picks a Q-network family for any env spec (Nature conv, MLP, small conv, one
Q per cell), each family's dueling head, masked argmax and the Double-DQN bootstrap, and runs saved with the
Nature-DQN head still loading."""

import json

import pytest
import torch

from shared.config import RunConfig
from shared.config_migration import read_config
from shared.evaluation.episodes import build_network
from shared.network import (
    CellQNetwork,
    MLPQNetwork,
    QNetwork,
    SmallConvQNetwork,
    acting_copy,
    build_q_network,
    cell_dilations,
    fold_batchnorm,
    masked_argmax,
    network_family,
)
from shared.spec import EnvSpec
from tests.support.networks import randomise_batchnorm

torch.set_num_threads(1)

MARIO = EnvSpec((84, 84), "uint8", 4, 7)
SNAKE_FEATURES = EnvSpec((14,), "float32", 1, 3)
SNAKE_GRID = EnvSpec((3, 10, 10), "uint8", 1, 3)
FUEL_BREAKS = EnvSpec((8, 32, 32), "uint8", 1, 32 * 32, masked=True)
SPECS = {
    "mario": (MARIO, "nature", QNetwork),
    "snake_features": (SNAKE_FEATURES, "mlp", MLPQNetwork),
    "snake_grid": (SNAKE_GRID, "small_conv", SmallConvQNetwork),
    "fuel_breaks": (FUEL_BREAKS, "cell", CellQNetwork),
}


def _dueling(state_dict: dict) -> bool:
    return any(k.startswith("advantage.") for k in state_dict)


def sample(spec: EnvSpec, batch: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    shape = (batch, *spec.input_shape)
    if spec.obs_dtype == "uint8":
        return torch.randint(0, 256, shape, dtype=torch.uint8, generator=g)
    return torch.randn(shape, generator=g)


def test_nature_dueling_q_is_value_plus_centred_advantage():
    torch.manual_seed(0)
    net = QNetwork(4, 7, 84).eval()
    obs = torch.randint(0, 256, (5, 4, 84, 84), dtype=torch.uint8)
    q = net(obs)
    assert q.shape == (5, 7) and q.dtype == torch.float32
    with torch.no_grad():
        x = net.features(obs.float() / 255.0)
        value, advantage = net.value(x), net.advantage(x)
    assert value.shape == (5, 1) and advantage.shape == (5, 7)
    torch.testing.assert_close(q, value + advantage - advantage.mean(1, keepdim=True))
    torch.testing.assert_close(q.mean(1, keepdim=True), value)  # the mean over actions is the state's value
    assert not hasattr(net, "head") and _dueling(net.state_dict())


def test_nature_head_checkpoints_still_load_and_resume_as_such(tmp_path):
    old = QNetwork(4, 7, 84, dueling=False).eval()
    state = old.state_dict()
    assert not _dueling(state) and not hasattr(old, "value")
    saved = json.loads(RunConfig().to_json())
    del saved["net"]  # a run saved before the network options existed ...
    cfg = read_config(json.dumps(saved))
    assert cfg.net.dueling is False  # ... had the Nature-DQN head (shared/config.py migrate)
    loaded = build_network(cfg.env, state, cfg.net)
    obs = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    torch.testing.assert_close(loaded(obs), old(obs))
    with pytest.raises(RuntimeError, match="Missing key"):
        QNetwork(4, 7, 84).load_state_dict(state)
    # a run folder written before the network options existed resumes with the Nature-DQN head
    from launch.resume import resumed_config

    raw = json.loads(RunConfig().to_json())
    del raw["net"]
    (tmp_path / "config.json").write_text(json.dumps(raw))
    assert resumed_config(RunConfig(resume=str(tmp_path))).net.dueling is False
    raw["net"] = {"dueling": True}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    assert resumed_config(RunConfig(resume=str(tmp_path))).net.dueling is True


@pytest.mark.parametrize("dueling", [True, False])
def test_q_values_and_head_stay_fp32_under_bf16_autocast(dueling):
    net = QNetwork(4, 7, 84, dueling=dueling).eval()
    gaps = 0.5 * torch.arange(7.0)
    with torch.no_grad():  # Q near 800 with gaps of 0.5: bf16 (steps of 4 there) would tie them all
        if dueling:
            net.value[2].weight.zero_()
            net.value[2].bias.fill_(800.0)
            net.advantage[2].weight.zero_()
            net.advantage[2].bias.copy_(gaps)
            expected = 800.0 + gaps - gaps.mean()
        else:
            net.head[2].weight.zero_()
            net.head[2].bias.copy_(800.0 + gaps)
            expected = 800.0 + gaps
    obs = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        q = net(obs)
    assert q.dtype == torch.float32
    assert torch.equal(q[0], expected)
    assert q.argmax(dim=1).tolist() == [6, 6, 6]


@pytest.mark.parametrize("name", SPECS)
@pytest.mark.parametrize("dueling", [True, False])
def test_factory_picks_the_family_and_q_shape(name, dueling):
    spec, family, cls = SPECS[name]
    torch.manual_seed(0)
    assert network_family(spec) == family
    net = build_q_network(spec, dueling=dueling)
    assert type(net) is cls and _dueling(net.state_dict()) == dueling
    net.train()
    q = net(sample(spec, 2))
    assert q.shape == (2, spec.num_actions) and q.dtype == torch.float32
    q.sum().backward()  # trains
    net.eval()
    with torch.no_grad():
        q1 = net(sample(spec, 1))  # batch 1, BatchNorm on running statistics
        with torch.autocast("cpu", dtype=torch.bfloat16):
            q_bf16 = net(sample(spec, 1))
    assert q1.shape == (1, spec.num_actions) and q1.dtype == torch.float32
    assert q_bf16.dtype == torch.float32 and torch.isfinite(q_bf16).all()
    torch.testing.assert_close(q_bf16, q1, atol=0.5, rtol=0.1)  # the same function, in lower precision
    # state dict round trip into a freshly built net
    randomise_batchnorm(net)
    other = build_q_network(spec, dueling=dueling).eval()
    other.load_state_dict(net.state_dict())
    obs = sample(spec, 3, seed=1)
    with torch.no_grad():
        torch.testing.assert_close(other(obs), net(obs))


@pytest.mark.parametrize("name", SPECS)
@pytest.mark.parametrize("dueling", [True, False])
def test_acting_copy_folds_batchnorm_into_the_same_function_and_bf16_stays_close(name, dueling):
    spec = SPECS[name][0]
    torch.manual_seed(0)
    net = build_q_network(spec, dueling=dueling)
    randomise_batchnorm(net)
    net.train()  # the source's mode and weights are left as they were
    before = {k: v.clone() for k, v in net.state_dict().items()}
    fp32, bf16 = acting_copy(net), acting_copy(net, "bf16")
    assert net.training and all(torch.equal(before[k], v) for k, v in net.state_dict().items())
    batchnorms = (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d)
    assert any(isinstance(m, batchnorms) for m in net.modules())
    assert not any(isinstance(m, batchnorms) for m in fp32.modules())  # every BatchNorm folded away
    assert not fp32.training and not any(p.requires_grad for p in fp32.parameters())
    assert all(p.dtype == torch.bfloat16 for p in bf16.features.parameters())
    obs = sample(spec, 8, seed=2)
    with torch.inference_mode():
        q, q_fp32, q_bf16 = net.eval()(obs), fp32(obs), bf16(obs)
    assert q_fp32.dtype == q_bf16.dtype == torch.float32 and q_bf16.shape == q.shape
    torch.testing.assert_close(q_fp32, q, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(q_bf16, q, atol=0.1, rtol=0.05)  # bf16's 8-bit mantissa
    assert not torch.equal(q_bf16, q_bf16.to(torch.bfloat16).float())  # fp32 sums, not bf16's grid (ties)
    with torch.no_grad():  # a copy, not a view: later changes to the source do not reach it
        next(net.parameters()).add_(1.0)
    with torch.inference_mode():
        torch.testing.assert_close(fp32(obs), q_fp32)


def test_acting_copy_and_fold_reject_what_they_cannot_do():
    net = build_q_network(MARIO)
    with pytest.raises(ValueError, match="'fp16'"):
        acting_copy(net, "fp16")
    with pytest.raises(ValueError, match="eval mode"):
        fold_batchnorm(net.train())


def test_factory_rejects_what_no_family_takes():
    with pytest.raises(ValueError, match=r"obs_shape \(84, 96\).*square"):
        build_q_network(EnvSpec((84, 96), "uint8", 4, 7))
    with pytest.raises(ValueError, match=r"obs_shape \(84, 96\)"):
        network_family(EnvSpec((84, 96), "uint8", 4, 7))
    with pytest.raises(ValueError, match=r"obs_shape \(20, 20\).*36"):
        build_q_network(EnvSpec((20, 20), "uint8", 4, 7))
    with pytest.raises(ValueError, match=r"obs_shape \(2, 3, 8, 8\)"):
        build_q_network(EnvSpec((2, 3, 8, 8), "uint8", 1, 7))
    with pytest.raises(ValueError, match="stack 4"):
        build_q_network(EnvSpec((14,), "float32", 4, 3))
    with pytest.raises(ValueError, match="stack 2"):
        build_q_network(EnvSpec((3, 10, 10), "uint8", 2, 3))
    with pytest.raises(ValueError, match="frame_size 64"):
        build_q_network(MARIO, frame_size=64)
    assert isinstance(build_q_network(MARIO, frame_size=84), QNetwork)


def test_other_routes_single_frames_and_large_square_grids():
    torch.manual_seed(0)
    single = EnvSpec((36, 36), "uint8", 1, 5)  # one grey frame, no stack: input [B, H, W]
    net = build_q_network(single).eval()
    assert network_family(single) == "nature" and net(sample(single, 2)).shape == (2, 5)
    image = EnvSpec((3, 40, 40), "uint8", 1, 4)
    assert network_family(image) == "nature" and build_q_network(image).eval()(sample(image, 1)).shape == (1, 4)
    big_grid = EnvSpec((3, 32, 32), "uint8", 1, 3)  # small conv downsamples to keep the head small
    net = build_q_network(big_grid).eval()
    assert network_family(big_grid) == "small_conv" and net.out_hw == (8, 8)
    assert net(sample(big_grid, 1)).shape == (1, 3)
    assert SmallConvQNetwork(3, 10, 10, 3).out_hw == (10, 10)


def test_mlp_scales_uint8_and_takes_float_as_is():
    torch.manual_seed(0)
    net = MLPQNetwork(6, 4).eval()
    randomise_batchnorm(net)
    raw = torch.randint(0, 256, (3, 6), dtype=torch.uint8)
    with torch.no_grad():
        torch.testing.assert_close(net(raw), net(raw.float() / 255.0))
        torch.testing.assert_close(net(raw.half()), net(raw.float()), atol=1e-3, rtol=1e-3)


def test_cell_dilations():
    assert cell_dilations(4, 32, 32) == (1, 2, 4, 8)
    assert cell_dilations(4, 10, 10) == (1, 2, 4, 4)
    assert cell_dilations(4, 3, 3) == (1, 1, 1, 1)
    assert cell_dilations(4, 32, 32, dilated=False) == (1, 1, 1, 1)
    assert CellQNetwork(8, 32, 32).receptive_field == 7  # the default: 3 undilated blocks
    assert CellQNetwork(8, 32, 32, blocks=4, dilated=True).receptive_field == 31


@pytest.mark.parametrize("dilated", [True, False])
@pytest.mark.parametrize("dueling", [True, False])
def test_cell_network_is_one_q_per_cell_translation_equivariant(dilated, dueling):
    """Shift the board by (dy, dx): away from the borders, the Q map shifts with it, in row-major order."""
    torch.manual_seed(0)
    c, side = 8, 32
    net = CellQNetwork(c, side, side, channels=16, dueling=dueling, dilated=dilated).eval()
    randomise_batchnorm(net)
    n = 48 if dilated else side  # dilated, the receptive field (31) needs a bigger board for an interior
    dy, dx = 3, 1  # different shifts along y and x: a column-major order would not match
    big = torch.randint(0, 256, (1, c, n + dy, n + dx), dtype=torch.uint8)
    a, b = big[:, :, :n, :n], big[:, :, dy:, dx:]  # b[y, x] == a[y + dy, x + dx]
    with torch.no_grad():
        qa, qb = net(a).view(n, n), net(b).view(n, n)
    r = net.receptive_field // 2  # cells within r of a border see the padding
    lo, hi = r, n - r  # interior of b, shifted: a's cells r+dy.. n-r+dy must be interior of a too
    ya, xa = slice(lo + dy, hi), slice(lo + dx, hi)
    yb, xb = slice(lo, hi - dy), slice(lo, hi - dx)
    assert qb[yb, xb].numel() >= 25
    if dueling:  # V and mean A are per board: the advantage differences between cells shift
        qa, qb = qa - qa[ya, xa].mean(), qb - qb[yb, xb].mean()
    torch.testing.assert_close(qb[yb, xb], qa[ya, xa], atol=1e-4, rtol=1e-4)
    assert not torch.allclose(qb[yb, xb], qa[yb, xb], atol=1e-3)  # and the map is not a constant


def test_cell_network_action_is_y_times_width_plus_x():
    torch.manual_seed(0)
    h, w = 5, 7  # non-square, any size: fully convolutional
    net = CellQNetwork(2, h, w, channels=8, blocks=2, dueling=False).eval()
    obs = torch.randint(0, 256, (2, 2, h, w), dtype=torch.uint8)
    with torch.no_grad():
        q = net(obs)
        cell_map = net.head(net.features(obs.float() / 255.0))  # [B, 1, H, W]
    assert q.shape == (2, h * w)
    for y, x in [(0, 0), (1, 3), (4, 6), (2, 0)]:
        assert q[1, y * w + x] == cell_map[1, 0, y, x]
    assert net(torch.randint(0, 256, (1, 2, 9, 4), dtype=torch.uint8)).shape == (1, 36)


def _value_and_advantage(net, obs):
    x = net.features(obs.float() / 255.0 if obs.dtype == torch.uint8 else obs.float())
    return net.value(x), net.advantage(x).flatten(1)


@pytest.mark.parametrize("name", ["snake_features", "snake_grid", "fuel_breaks"])
def test_mlp_small_conv_and_cell_dueling_q_is_value_plus_centred_advantage(name):
    spec = SPECS[name][0]
    torch.manual_seed(0)
    net = build_q_network(spec).eval()
    randomise_batchnorm(net)
    obs = sample(spec, 4)
    with torch.no_grad():
        q = net(obs)
        value, advantage = _value_and_advantage(net, obs)
    assert value.shape == (4, 1) and advantage.shape == (4, spec.num_actions)
    torch.testing.assert_close(q, value + advantage - advantage.mean(1, keepdim=True))
    torch.testing.assert_close((q - value).mean(1), torch.zeros(4), atol=1e-5, rtol=0)
    assert not hasattr(net, "head")


def test_masked_argmax_never_picks_a_masked_action():
    g = torch.Generator().manual_seed(0)
    b, a = 256, 40
    q = torch.randn(b, a, generator=g) * 10
    mask = torch.rand(b, a, generator=g) < torch.rand(b, 1, generator=g)  # from nearly none to nearly all valid
    mask[torch.arange(b), torch.randint(0, a, (b,), generator=g)] = True  # every row has a valid action
    mask[0] = False
    mask[0, a - 1] = True  # a single valid action, the last one
    best = masked_argmax(q, mask)
    assert best.shape == (b, 1) and best.dtype == torch.long
    assert mask.gather(1, best).all()
    torch.testing.assert_close(q.gather(1, best).squeeze(1), q.masked_fill(~mask, float("-inf")).max(1).values)
    assert best[0, 0] == a - 1
    assert torch.equal(masked_argmax(q, None), q.argmax(1, keepdim=True))
    assert torch.equal(masked_argmax(q, torch.ones_like(mask)), q.argmax(1, keepdim=True))


def test_masked_argmax_with_valid_q_below_minus_1e9():
    g = torch.Generator().manual_seed(1)
    q = torch.zeros(64, 30)  # the invalid actions hold the higher values
    mask = torch.rand(64, 30, generator=g) < 0.2
    mask[:, 7] = True
    q[mask] = -1e9 - 1e10 * torch.rand(int(mask.sum()), generator=g)
    best = masked_argmax(q, mask)
    assert mask.gather(1, best).all()
    torch.testing.assert_close(q.gather(1, best).squeeze(1), q.masked_fill(~mask, float("-inf")).max(1).values)
    naive = q.masked_fill(~mask, -1e9).argmax(1, keepdim=True)  # what a large negative constant would do
    assert not mask.gather(1, naive).all()
    # the same in bf16 (autocast Q would be fp32, but the helper must not rely on it)
    assert mask.gather(1, masked_argmax(q.bfloat16(), mask)).all()


def test_masked_argmax_edge_cases():
    mask = torch.tensor([[False, True, False, True], [False, False, True, True], [True, False, False, True]])
    inf = float("inf")
    q = torch.tensor(
        [
            [9.0, -inf, 9.0, -inf],  # all valid Q are -inf: the first valid action
            [0.0, 0.0, float("nan"), 1.0],  # NaN among the valid: still a valid action
            [2.0, 5.0, 5.0, 2.0],
        ]
    )  # a tie among the valid: the lowest index
    best = masked_argmax(q, mask).squeeze(1)
    assert mask[torch.arange(3), best].all()
    assert best[0] == 1 and best[2] == 0
    with pytest.raises(ValueError, match="mask shape"):
        masked_argmax(q, mask[:, :3])
