"""Plain helper modules the tests import (pytest collects no tests here, and conftest.py keeps only hooks and
fixtures): run configurations on free ports, the launcher as a subprocess, valid protocol batches, the learning
runs' training and scoring, small networks, and a spawn target for the orphan check."""
