"""The learner's replay: the uint8 frame ring with its n-step rule (frame_ring.py), prioritized sampling on top of it
(prioritized.py) over a sum tree (sum_tree.py)."""
