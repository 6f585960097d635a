"""Seeds: one per run, and independent streams derived from it.

``--seed`` is the run's seed; left at -1, the launcher draws a fresh one (``draw_seed``) and saves it in
``config.json``, so two runs never share a seed by accident and any run can be repeated with ``--seed N``.
The learner's initialisation and sampling, each actor's envs and exploration, and every evaluation take
their seeds from it: the components' own seed options (``--actor.seed``, ``--learner.seed``, ``--eval.seed``)
default to the run's seed and exist to vary one part alone. An actor's exploration stream is keyed by its slot
and by how many times the launcher has started that slot, so a restarted actor does not repeat its predecessor's
random choices and a repeated run explores the same way; what differs between two runs of one seed is process
timing (which weights each batch was played with, which batches a learner step sees).

``stream_seed(*keys)`` turns a key such as (eval seed, purpose, round) into a 32-bit seed with numpy's
SeedSequence, which hashes its whole input: streams with different keys are independent, and neighbouring
run seeds (0, 1, 2, ...) give unrelated streams, unlike ``seed + round``.
"""

from __future__ import annotations

import secrets

import numpy as np

# Purposes of the evaluation streams (the second key of stream_seed): an in-training round, the end-of-run
# selection among the best snapshots, the final evaluation, its late window (the kept weights), its low-epsilon row
# and its no-op-start row (launch/final_eval.py; launch.evaluate's secondary rows too). No two purposes ever draw the
# same stream.
EVAL_ROUND, EVAL_SELECT, EVAL_FINAL, EVAL_LATE, EVAL_LOW_EPSILON, EVAL_NOOP = 1, 2, 3, 4, 5, 6


def draw_seed() -> int:
    """A fresh run seed from the OS's entropy: a non-negative 31-bit int (fits every library's seed)."""
    return secrets.randbits(31)


def stream_seed(*keys: int) -> int:
    """A 32-bit seed for the stream named by ``keys`` (non-negative ints)."""
    return int(np.random.SeedSequence([int(k) for k in keys]).generate_state(1)[0])
