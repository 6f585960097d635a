"""``python -m launch.local`` whose every update raises the same error: a deterministic learner failure (a bug, a
poisoned input) for the tests of what a restart policy meets. Only the update is replaced; sockets, actors, replay
and checkpoints are the real ones.

    python -m tests.support.failing_learner <launch.local options>
"""

import sys

from launch.local import main
from learner.trainer import DQNLearner


def _fails(self, *args, **kwargs):
    raise RuntimeError("injected: this update always fails")


if __name__ == "__main__":
    DQNLearner.update = _fails
    sys.exit(main())
