"""A valid experience batch, as the tests that aim messages at a learner's sockets send it."""

import numpy as np

from shared.wire import protocol


def valid_batch(cfg, actor=0, incarnation=99, seq=0, steps=None) -> list[bytes]:
    """A well-formed batch for ``cfg``'s actor shape (``envs_per_actor`` x ``batch_steps``, or ``steps``, square uint8
    frames of ``env.frame_size``): zero frames, actions, rewards and flags, every slot the first of an episode, zero
    stats; sent as ``actor``'s ``seq``-th batch of ``incarnation``. The frames are independent byte strings, as they
    travel, so a test can cut or replace any of them."""
    shape = (cfg.actor.envs_per_actor, cfg.actor.batch_steps if steps is None else steps)
    size = cfg.env.frame_size
    arrays = (
        np.zeros(shape + (size, size), np.uint8),
        np.zeros(shape, np.uint8),
        np.zeros(shape, np.float32),
        np.zeros(shape, np.uint8),
        np.ones(shape, np.uint8),
    )
    stats = {k: 0.0 for k in protocol.STAT_KEYS}
    return [bytes(memoryview(p)) for p in protocol.encode_batch(actor, incarnation, seq, 0, *arrays, stats=stats)]
