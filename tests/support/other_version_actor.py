"""``python -m launch.actor`` as a release of the next protocol version would run it: every message it encodes, and
every one it accepts, carries ``protocol.VERSION + 1``. For the version-skew tests of the lease path.

    python -m tests.support.other_version_actor <launch.actor options>
"""

import sys

from launch.actor import main
from shared.wire import protocol

if __name__ == "__main__":
    protocol.VERSION += 1
    sys.exit(main())
