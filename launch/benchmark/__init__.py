"""``python -m launch.benchmark``: the data plane measured stage by stage in one run (see __main__.py).

One module per stage, ``original`` the seed's pipeline the system stage measures against; ``__main__`` runs the
stages asked for and writes the JSON and the tables."""
