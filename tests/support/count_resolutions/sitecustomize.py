"""Put on PYTHONPATH with WARPPIPE_RESOLVE_LOG set, it makes every Python process (a launcher and the actors it
spawns) append its pid to that file at each call of the resolver (shared/resolution.py ``resolve_run``)."""

import os

if os.environ.get("WARPPIPE_RESOLVE_LOG"):
    import shared.resolution as _resolution

    _resolve_run = _resolution.resolve_run

    def _counted(*args, **kwargs):
        with open(os.environ["WARPPIPE_RESOLVE_LOG"], "a") as fh:
            fh.write(f"{os.getpid()}\n")
        return _resolve_run(*args, **kwargs)

    _resolution.resolve_run = _counted
