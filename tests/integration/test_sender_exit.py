"""An actor's last batches arrive intact although the actor process exits right after sending them.

The sender hands its arrays to ZeroMQ without copying them. A process that exits while ZeroMQ's I/O thread
still writes a batch frees those arrays under it (pyzmq drops its references at interpreter exit), and the
learner then reads heap bookkeeping in the batch's first bytes, or never gets the batch. ``BatchSender.close``
must wait until ZeroMQ has let go of every array it was given.
"""

import subprocess
import sys

import numpy as np
import zmq

from shared.wire import protocol
from tests.support.paths import ROOT

# 3.6 MB of frames a batch, 29 MB in all: more than the kernel's buffers and the receiving socket take in unread
BATCHES, ENVS, STEPS, SHAPE = 8, 4, 32, (4, 84, 84)
EXIT_CHANCE_S = 3.0
"""How long the test holds its reads back after the sender's ``close()`` starts, so that a sender that does not
wait for ZeroMQ gets the chance to exit with its batches in flight (it does in well under a second). This wait
only gives the bug room to show; no assertion depends on what happens within it: a correct sender is still
blocked in ``close()`` when it ends, and the verdict comes from the bytes read afterwards, under hang guards."""

SENDER = f"""
import sys
import numpy as np
from actors.sender import BatchSender, StagedBatch
from shared.wire import protocol
port = int(sys.argv[1])
for _ in range(3):  # free arrays of the batch's size first, as a long-running actor has (glibc's mmap threshold
    np.ones(({ENVS}, {STEPS}) + {SHAPE}, np.uint8)  # then rises and the frames come from the heap)
sender = BatchSender(f"tcp://127.0.0.1:{{port}}", 0, 7, max_staged={BATCHES}, send_hwm={BATCHES})
stats = {{key: 0.0 for key in protocol.STAT_KEYS}}
rng = np.random.default_rng(0)
for seq in range({BATCHES}):
    frames = rng.integers(1, 256, size=({ENVS}, {STEPS}) + {SHAPE}, dtype=np.uint8)
    actions = np.full(({ENVS}, {STEPS}), seq, np.uint8)
    rewards = np.zeros(({ENVS}, {STEPS}), np.float32)
    zeros = np.zeros(({ENVS}, {STEPS}), np.uint8)
    sender.submit(StagedBatch(seq, 0, (frames, actions, rewards, zeros, zeros.copy())), stats)
    del frames  # the sender's socket holds the only reference now, as in an actor's loop
print("closing", flush=True)
sender.close(stats, timeout=30.0)
"""


def expected_frames() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.integers(1, 256, size=(ENVS, STEPS) + SHAPE, dtype=np.uint8) for _ in range(BATCHES)]


def test_batches_sent_just_before_the_actor_exits_arrive_byte_for_byte():
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.setsockopt(zmq.RCVHWM, 1)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    child = subprocess.Popen([sys.executable, "-c", SENDER, str(port)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "closing"  # every batch is with the socket; not one is read yet
        child.wait(timeout=EXIT_CHANCE_S)  # a sender that does not wait for ZeroMQ exits here, batches in flight
    except subprocess.TimeoutExpired:
        pass  # one that waits is still here, until the reads below
    try:
        limits = protocol.Limits(SHAPE, 256)
        got = []
        while pull.poll(10_000):
            got.append(protocol.decode_batch(pull.recv_multipart(copy=False), limits))
            if len(got) == BATCHES:
                break
        assert child.wait(timeout=60) == 0
        assert [b.seq for b in got] == list(range(BATCHES))
        for batch, frames in zip(got, expected_frames()):
            first_bad = np.flatnonzero((batch.frames != frames).reshape(-1))
            assert first_bad.size == 0, f"batch {batch.seq}: {first_bad.size} bytes differ, the first at {first_bad[:4]}"
    finally:
        child.kill()
        child.wait(10)
        pull.close(0)
        ctx.term()
