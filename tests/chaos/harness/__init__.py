"""Chaos and power-loss harness (docs/chaos.md): deployments as processes, networks and the nemesis, the
recording workloads, the power-loss restore, checkers and reports. Used by scripts/chaos.py and tests/chaos."""
