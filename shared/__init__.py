"""What actors, learner and launchers share: configuration, the wire, envs, the Q-network, TD rules and seeds."""
