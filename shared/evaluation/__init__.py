"""Evaluation, in one room: episodes played with the one epsilon-greedy policy (episodes.py), the protocol of rows and
seeds (protocol.py), where episodes end (hazards.py), each hazard drilled from a saved state (drills.py), the typed
result in eval_final.json (result.py), old names (names.py) and films (video.py). Used by the evaluation actor,
launch.evaluate and the final evaluation."""
