"""Tools that read what runs leave and write docs; none of them trains or plays.

``report`` compares groups of runs, ``plot`` draws learning curves, ``gendocs`` writes the generated docs pages.
"""
