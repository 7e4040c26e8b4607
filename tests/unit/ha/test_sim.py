"""Seeded simulations of a 3-replica broker set driving the HA cores (see sim.py for faults and invariants).

Default: 200 seeds (allAckInSyncStateSet on for even seeds, off for odd) × 300 steps, then heal and converge.
`-m slow`: 2000 more seeds × 1500 steps. Replay one: HA_SIM_SEED=N pytest tests/unit/ha/test_sim.py
"""

from __future__ import annotations

import os

import pytest

from tests.unit.ha.sim import run_seed

DEFAULT_SEEDS = 200
DEFAULT_STEPS = 300

SEEDS = [int(os.environ["HA_SIM_SEED"])] if os.environ.get("HA_SIM_SEED") else list(range(DEFAULT_SEEDS))


@pytest.mark.parametrize("seed", SEEDS)
def test_replication_is_safe_under_random_faults_and_converges(seed: int) -> None:
    run_seed(seed, DEFAULT_STEPS, all_ack=seed % 2 == 0)


def test_the_simulation_exercises_failovers_truncations_and_sss_changes() -> None:
    """Guard against a vacuous simulation: across a few seeds the interesting things do happen."""
    totals: dict[str, int] = {}
    for seed in range(10):
        sim = run_seed(seed, DEFAULT_STEPS, all_ack=True)
        for k, v in sim.stats.items():
            totals[k] = totals.get(k, 0) + v
        totals["committed"] = totals.get("committed", 0) + len(sim.committed)
    assert totals["elections"] > 20 and totals["alters"] > 20 and totals["crashes"] > 10
    assert totals["appends"] > 500 and totals["committed"] > 50_000


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(DEFAULT_SEEDS, DEFAULT_SEEDS + 2000))
def test_many_seeds_long_runs(seed: int) -> None:
    run_seed(seed, 1500, all_ack=seed % 2 == 0)
