"""POP consumption (RocketMQ 5): see the package modules."""
