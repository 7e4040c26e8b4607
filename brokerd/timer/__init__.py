"""Timer messages (RocketMQ 5, RIP-43): see the package modules."""
