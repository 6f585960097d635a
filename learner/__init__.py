"""The learner role: the actors' batches consolidated into replay, the DQN update, weights out, checkpoints and metrics."""
