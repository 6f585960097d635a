"""The actor role: collector processes that play envs and stream batches, the evaluator, their weight and slot clients."""
