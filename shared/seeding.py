"""Seeds: one per run, and independent streams derived from it.

Every component takes its seed from the run's (``--actor.seed`` etc. vary one part alone); an actor's stream is keyed
by its slot and how often the launcher started it. :func:`stream_seed` hashes a whole key with numpy's SeedSequence, so
neighbouring run seeds give unrelated streams, unlike ``seed + round``.
"""

from __future__ import annotations

import secrets

import numpy as np

# Purposes of the evaluation streams (stream_seed's second key), so no two draw the same stream.
EVAL_ROUND, EVAL_SELECT, EVAL_FINAL, EVAL_LATE, EVAL_LOW_EPSILON, EVAL_NOOP, EVAL_DRILLS = 1, 2, 3, 4, 5, 6, 7


def draw_seed() -> int:
    """A fresh run seed from the OS's entropy: a non-negative 31-bit int (fits every library's seed)."""
    return secrets.randbits(31)


def stream_seed(*keys: int) -> int:
    """A 32-bit seed for the stream named by ``keys`` (non-negative ints)."""
    return int(np.random.SeedSequence([int(k) for k in keys]).generate_state(1)[0])
