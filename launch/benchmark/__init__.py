"""``python -m launch.benchmark``: the data plane measured stage by stage in one run (see __main__.py)."""
