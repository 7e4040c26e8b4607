"""Seeded whole-cluster simulations (see tests/sim/cluster.py for what one run does and checks).

Default run: 200 seeds (3 and 5 replicas alternately), short runs. `-m slow`: thousands more, longer.
Replay one failure with the command printed in the assertion message, or `SIM_SEED=N pytest tests/sim`.
"""

from __future__ import annotations

import os

import pytest

from tests.sim.cluster import run_seed

DEFAULT_SEEDS = 200
DEFAULT_STEPS = 5000


def _nodes_for(seed: int) -> int:
    return 3 if seed % 2 == 0 else 5


if os.environ.get("SIM_SEED"):
    SEEDS = [int(os.environ["SIM_SEED"])]
else:
    SEEDS = list(range(DEFAULT_SEEDS))


@pytest.mark.parametrize("seed", SEEDS)
def test_simulated_cluster_is_safe_live_and_linearizable(seed: int) -> None:
    run_seed(seed, _nodes_for(seed), DEFAULT_STEPS)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(DEFAULT_SEEDS, DEFAULT_SEEDS + 4000))
def test_many_seeds_long_runs(seed: int) -> None:
    run_seed(seed, _nodes_for(seed), 20_000)
