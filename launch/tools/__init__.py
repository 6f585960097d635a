"""Tools that read what runs leave and write docs; none of them trains or plays.

``python -m launch.tools.report`` compares groups of runs with confidence intervals, ``python -m launch.tools.plot``
draws learning curves from ``metrics.jsonl``, ``python -m launch.tools.gendocs`` writes the generated docs pages.
Nothing outside this folder imports it.
"""
