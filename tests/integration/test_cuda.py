"""The learner on a CUDA GPU: compiled (CUDA graphs) updates with and without accumulation match eager ones, a
resume places every optimizer tensor where it belongs, and launch.local trains on the GPU. Skipped without a GPU."""

import copy
import dataclasses
import functools
import glob
import os
import subprocess
import sys

import pytest
import torch

from learner.checkpoint import load_checkpoint, load_resume_state, save_checkpoint
from learner.trainer import DQNLearner
from shared.config import LearnerConfig
from shared.resolution import learner_config
from shared.spec import EnvSpec
from tests.support.batches import split, synthetic_batch
from tests.support.paths import ROOT
from tests.support.runs import free_base_port

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU: CUDA graphs, fused Adam and device placement"
)


SIZE, STACK, ACTIONS = 84, 4, 7
SPEC = EnvSpec((SIZE, SIZE), "uint8", STACK, ACTIONS)
CUDA = torch.device("cuda")


gpu_batch = functools.partial(synthetic_batch, size=SIZE, actions=ACTIONS, device=CUDA)  # Mario's frames and actions


class _Sampler:
    def sample(self, n):
        return gpu_batch(n, seed=99)


# Tolerance: relative error of each gradient's norm. Measured on an H200 (docs/lab/gpu-log.md): up to 0.015 with TF32, 0.022
# with bf16, 0.050 with fp16. A micro-batch of 4 lost or counted twice would be off by about half (arithmetic, not
# measured: four nearly independent micro-batch gradients, each about half the norm of their sum).
@pytest.mark.parametrize("amp, grad_tol", [("off", 5e-2), ("bf16", 1e-1), ("fp16", 1e-1)])  # fp16: GradScaler + fused Adam
@pytest.mark.parametrize("accum", [1, 4])
def test_compiled_cuda_graph_update_matches_eager(accum, amp, grad_tol):
    """mode reduce-overhead (CUDA graphs) with accumulation: the update neither crashes (pytorch#169545) nor
    accumulates into reused memory; each update's gradients and weights follow the eager learner's within AMP/TF32
    rounding, from the same state.

    What would make two correct learners disagree by more than rounding is kept out: a fresh network's Q-values are
    nearly equal, so the Double-DQN argmax at s' could differ between two numerically different forward passes and
    change those samples' targets (the advantage head's bias is set 20 apart per action, so one action leads by far
    more than rounding); fp16's GradScaler starts at 2**10, not 2**16, where a fresh network's scaled gradients sit at
    fp16's overflow edge and one learner could skip a step the other takes; and the eager learner starts each update
    from the compiled one's state, so rounding does not compound over updates."""
    torch._dynamo.reset()  # fresh Dynamo and CUDA-graph state per learner pair
    lr, updates = 1e-3, 3
    cfg = LearnerConfig(micro_batch=32, accum_steps=accum, compile=True, amp=amp, lr=lr, max_grad_norm=10.0)
    compiled = DQNLearner(learner_config(cfg), SPEC, CUDA)
    eager = DQNLearner(learner_config(dataclasses.replace(cfg, compile=False)), SPEC, CUDA)
    assert compiled.cuda_graphs and not eager.cuda_graphs
    with torch.no_grad():
        compiled.online.advantage[2].bias.copy_(20.0 * torch.arange(ACTIONS, dtype=torch.float32))
    compiled.sync_target()
    if amp == "fp16":
        for dqn in (compiled, eager):
            dqn.scaler = torch.amp.GradScaler("cuda", init_scale=2.0**10)
    grads = [p.grad for p in compiled.online.parameters()]
    compiled.warm_up(_Sampler())
    for i in range(updates):
        # a copy: Optimizer.load_state_dict keeps the given tensors when device and dtype match, and the compiled
        # learner's step would then move the eager one's Adam moments too
        eager.load_state_dict(copy.deepcopy(compiled.state_dict()))
        before = {k: v.clone() for k, v in compiled.online.state_dict().items()}
        batches = split(gpu_batch(32 * accum, seed=10 + i), accum)
        s_c, s_e = compiled.update(None, batches), eager.update(None, batches)
        assert s_c.loss == pytest.approx(s_e.loss, rel=grad_tol, abs=1e-4), i
        assert compiled.scaler.get_scale() == eager.scaler.get_scale(), i  # both took (or skipped) the step
        for (name, p), q in zip(compiled.online.named_parameters(), eager.online.parameters(), strict=True):
            err = (p.grad - q.grad).norm() / q.grad.norm().clamp_min(1e-12)
            assert err < grad_tol, (name, float(err), i)
        # Adam's step agrees to a fifth of its size, over all weights at once: Adam moves an element whose gradient
        # is near 0 by up to lr either way, so in a small tensor (a BatchNorm's 32 weights) one element whose gradient
        # rounds to the other sign is a fifth of the step by itself
        after_c = torch.cat([p.detach().flatten() for p in compiled.online.parameters()])
        after_e = torch.cat([p.detach().flatten() for p in eager.online.parameters()])
        start = torch.cat([before[name].flatten() for name, _ in compiled.online.named_parameters()])
        moved = (after_e - start).norm()
        assert moved > 0, i
        assert (after_c - after_e).norm() <= 0.2 * moved, (i, float((after_c - after_e).norm() / moved))
    assert compiled.updates == updates
    assert all(p.grad is g for p, g in zip(compiled.online.parameters(), grads, strict=True))  # never reallocated


def test_resume_puts_each_optimizer_tensor_on_its_device(tmp_path):
    """Checkpoint read to the CPU, loaded into a CUDA learner: Adam's moments on the GPU; step on the GPU for fused
    or capturable Adam (torch's rule), on the CPU otherwise; the resumed learner keeps training."""
    cfg = LearnerConfig(micro_batch=32, accum_steps=2, compile=False, amp="auto")
    dqn = DQNLearner(learner_config(cfg), SPEC, CUDA)
    dqn.update(None, split(gpu_batch(64, seed=1), 2))
    save_checkpoint(str(tmp_path), {"learner": dqn.state_dict(), "counters": {"epoch": 1}, "config": "{}"})
    state = load_resume_state(str(tmp_path))
    assert all(t.device.type == "cpu" for t in state["learner"]["optimizer"]["state"][0].values())
    resumed = DQNLearner(learner_config(dataclasses.replace(cfg, seed=3)), SPEC, CUDA)
    resumed.load_state_dict(state["learner"])
    for group in resumed.optimizer.param_groups:
        step_on_device = bool(group.get("fused")) or bool(group.get("capturable"))
        for p in group["params"]:
            st = resumed.optimizer.state[p]
            assert st["exp_avg"].device == p.device and st["exp_avg_sq"].device == p.device
            assert st["step"].device == (p.device if step_on_device else torch.device("cpu"))
    assert all(bool(g["fused"]) for g in resumed.optimizer.param_groups)  # what a CUDA learner builds
    for a, b in zip(dqn.online.parameters(), resumed.online.parameters(), strict=True):
        assert b.device.type == "cuda" and torch.equal(a, b)
    resumed.update(None, split(gpu_batch(64, seed=2), 2))
    assert resumed.updates == 2


@pytest.mark.slow
@pytest.mark.timeout(900)  # a hang guard
def test_local_run_trains_on_cuda_with_accumulation(tmp_path):
    """launch.local on the GPU with the CUDA defaults (fp32, compile with CUDA graphs) and 4 micro-batches per update."""
    cmd = [
        sys.executable,
        "-m",
        "launch.local",
        "--actors",
        "1",
        "--env.name",
        "catch",
        "--seed",
        "0",
        "--device",
        "cuda",
        "--learner.steps",
        "50",
        "--learner.accum-steps",
        "4",
        "--learner.micro-batch",
        "64",
        "--learner.min-replay",
        "500",
        "--learner.updates-per-epoch",
        "10",
        "--replay.capacity",
        "8192",
        "--eval.final-episodes",
        "0",
        "--log-every",
        "10",
        "--no-progress",
        "--transport.base-port",
        str(free_base_port(4) + 2),
        "--run-dir",
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=800)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "compile: True" in out and "batch 64 x 4" in out, out
    state = load_checkpoint(glob.glob(os.path.join(str(tmp_path), "*"))[0])
    assert state["counters"]["updates"] == 50
    assert all(torch.isfinite(v).all() for v in state["learner"]["online"].values() if v.is_floating_point())
