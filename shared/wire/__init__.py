"""The wire between actors and learner: the message contract (protocol.py), socket options and addresses
(links.py), CURVE keys (curve.py)."""
