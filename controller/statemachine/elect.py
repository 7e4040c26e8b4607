"""The election policy (spec 6.3, RocketMQ DefaultElectPolicy), pure: image data + liveness in, broker id out.

Used by `decide` on the leader and again by `apply` on every replica with the liveness data carried in the
`ElectMasterEvent`, so every replica computes the same winner.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from controller.statemachine.events import BrokerLiveness
from controller.statemachine.image import BrokerSet

CONTROLLER_TRIGGER = -1


def _try_elect(candidates: Iterable[int], live: Mapping[int, BrokerLiveness], old_master: int | None,
               preferred: int | None) -> int | None:
    alive = [i for i in sorted(candidates) if (x := live.get(i)) is not None and x.alive]
    if not alive:
        return None
    if old_master is not None and old_master in alive and (preferred is None or preferred == old_master):
        return old_master
    if preferred is not None:
        return preferred if preferred in alive else None

    def rank(i: int) -> tuple[int, int, int, int]:
        x = live[i]
        # higher epoch, then higher max offset, then lower priority value; the id breaks ties deterministically
        return (-x.epoch, -x.max_offset, x.election_priority, i)

    return min(alive, key=rank)


def choose_master(bset: BrokerSet, live: Mapping[int, BrokerLiveness], requester: int, designate: bool,
                  unclean: bool) -> int | None:
    """The broker id that should be master after this election, or None when nobody can be.

    First election (masterEpoch == 0) with a real requester: the requester wins outright (no liveness check).
    """
    if bset.first_time_for_elect and requester != CONTROLLER_TRIGGER and not designate:
        return requester if requester in bset.brokers else None
    preferred = requester if designate and requester != CONTROLLER_TRIGGER else None
    winner = _try_elect(bset.sync_state_set, live, bset.master_broker_id, preferred)
    if winner is None and unclean:
        winner = _try_elect(bset.brokers.keys(), live, bset.master_broker_id, preferred)
    return winner
