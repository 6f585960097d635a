"""The benchmark's options (``python -m launch.benchmark --help``) and its stages."""

from __future__ import annotations

from dataclasses import dataclass, field

from launch.benchmark.original import OriginalSettings
from shared.config import RunConfig


@dataclass
class BenchConfig:
    """What to measure and for how long."""

    actors: int = 2
    """K: env processes / actor processes for env_ceiling and collection."""
    seconds: float = 20.0
    """Timed window of each env_ceiling / collection round, after warm-up (a collection round runs on until each
    actor has sent 3 messages in it)."""
    rounds: int = 2
    """Alternating env_ceiling / collection rounds."""
    transport_seconds: float = 10.0
    """Timed window of the transport stage."""
    transport_senders: int = 1
    """Synthetic sender processes in the transport stage."""
    transport_batch: int = 256
    """Frames per synthetic message (one env, T steps)."""
    learner_updates: int = 40
    """Updates per timed epoch in the learner stage."""
    learner_epochs: int = 4
    """Timed epochs per variant in the learner stage (the first is compared with the rest)."""
    system_seconds: float = 60.0
    """Timed window of each whole-system run (original, optimized), after replay holds system_min_replay."""
    system_min_replay: int = 2000
    """Transitions in replay before the whole-system runs start training (and their clocks)."""
    system_min_epochs: int = 2
    """Each whole-system run trains past system_seconds until it has this many epochs (a slow machine still gives
    rates measured over whole epochs)."""
    system_updates_per_epoch: int = 5
    """Updates per epoch in both whole-system runs (the unit of epoch time and of the sync periods)."""
    optimized_micro_batch: int = 512
    """Optimized system: samples per micro-batch."""
    optimized_accum: int = 4
    """Optimized system: micro-batches accumulated per update."""
    optimized_broadcast_env_steps: int = 1_600
    """Optimized system: env steps between weight broadcasts (a training run's default)."""
    original: OriginalSettings = field(default_factory=OriginalSettings)
    """The seed's original pipeline (launch/benchmark/original.py)."""
    stages: tuple[str, ...] = ("env_ceiling", "collection", "transport", "replay", "learner", "system")
    """Stages to run (also, not in the default list: priority, which fills 7 GB replays; starts, saved-state starts off
    against on)."""
    priority_capacities: tuple[int, ...] = (100_000, 1_000_000)
    """Replay capacities of the priority stage."""
    priority_batches: tuple[int, ...] = (512, 2048)
    """Batch sizes of the priority stage."""
    starts_warm_up: int = 1_000
    """Starts stage: env steps each arm plays before its timed steps (the chooser learns where episodes end)."""
    starts_env_steps: int = 3_000
    """Starts stage: timed env steps of each arm in each round (--rounds rounds)."""
    quick: bool = False
    """Short windows (every option still at its default is shrunk): the whole run in under 3 minutes on 2 cores."""
    json: str = ""
    """Write every figure here as JSON."""
    env: str = ""
    """Shorthand for --run.env.name (mario, catch, fake, snake, fuelbreak); empty: --run.env.name's value."""
    run: RunConfig = field(default_factory=RunConfig)
    """Run configuration used by the stages (env, actor, replay, transport)."""


# Values --quick gives to options left at their defaults.
QUICK = dict(
    seconds=5.0,
    rounds=1,
    transport_seconds=3.0,
    learner_updates=4,
    learner_epochs=2,
    system_seconds=20.0,
    system_min_replay=1000,
    system_updates_per_epoch=2,
)

STAGES = ("env_ceiling", "collection", "transport", "replay", "priority", "learner", "system", "starts")

# The collection stage's two kinds: kind, label, and the actor setting it changes from the run's
COLLECTIONS = (
    ("random", "random actions", "epsilon", 1.0),
    ("apex", "Ape-X eps-greedy", "eps_anneal_env_steps", 0),  # the floors from the first step: inference as in late training
)


def apply_quick(bench: BenchConfig) -> None:
    defaults = BenchConfig()
    for name, value in QUICK.items():
        if getattr(bench, name) == getattr(defaults, name):
            setattr(bench, name, value)
