"""What each weight broadcast leaves behind: the probe figures (churn since the last broadcast, action gaps) in
metrics.jsonl and TensorBoard, and every ``eval.keep_weights_env_steps`` the weights in kept/, of which the last
``eval.keep_weights`` stay for the final evaluation's late window."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from learner.checkpoint import save_kept
from learner.probe_figures import ProbeMonitor
from learner.schedule import EnvStepPeriod
from shared.config import RunConfig
from shared.probe_set import probe_set_cached


def probe_monitor(run_dir: str, cfg: RunConfig, device: torch.device) -> ProbeMonitor | None:
    """The probe set's monitor (learner/probe_figures.py), or None, said, where the env cannot be built here."""
    try:
        probe = probe_set_cached(run_dir, cfg.env)
    except Exception as exc:  # noqa: BLE001 - an instrument, never a reason to stop training
        print(f"[MAIN] no probe set: {type(exc).__name__}: {exc}; churn and action gaps are not logged", flush=True)
        return None
    return ProbeMonitor(probe.states, device, probe.masks)


class BroadcastRecorder:
    """Records each broadcast of a training run (nothing when only collecting)."""

    def __init__(self, run_dir: str, cfg: RunConfig, device: torch.device, metrics: Any, start: int, echo: Callable[[str], None]):
        """``metrics``: the run's MetricsLog (None: not training); ``start``: the env steps this start begins at."""
        ev, train = cfg.eval, metrics is not None
        self.run_dir, self.keep, self.metrics, self.echo = run_dir, ev.keep_weights, metrics, echo
        self.keep_period = EnvStepPeriod(ev.keep_weights_env_steps if ev.keep_weights and train else 0, start)
        self.probe = probe_monitor(run_dir, cfg, device) if train else None

    def record(self, version: int, online: torch.nn.Module, updates: int, inserted: int, elapsed: float) -> None:
        if self.probe is not None and self.metrics is not None:
            figures = self.probe.observe(online) | {"probe/weights_version": version}
            self.metrics.write(updates, inserted, elapsed, figures)
        if self.keep_period.due(inserted):
            state = {
                "learner": {"online": online.state_dict()},
                "counters": {"weights_version": version, "inserted": inserted, "updates": updates},
            }
            try:
                save_kept(self.run_dir, state, self.keep)
            except (OSError, RuntimeError) as exc:  # a full disk costs the late window a member, not the run
                self.echo(f"[MAIN] kept weights v{version} not written ({type(exc).__name__}: {exc}); training goes on")
