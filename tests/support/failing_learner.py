"""``python -m launch.local`` whose learner loop raises the same error at its first turn: a deterministic learner
failure (a bug, a poisoned input) for the tests of what a restart policy meets. Only the loop's turn is replaced;
sockets, actors, replay and checkpoints are the real ones.

    python -m tests.support.failing_learner <launch.local options>
"""

import sys

from launch.local import main
from learner.loop import Learner


def _fails(self, *args, **kwargs):
    raise RuntimeError("injected: this update always fails")


if __name__ == "__main__":
    Learner.step = _fails
    sys.exit(main())
