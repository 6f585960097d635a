"""The programs that start learner and actors (``python -m launch.local`` and others), the benchmark and the tools."""
