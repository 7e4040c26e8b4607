"""Controller-triggered elections (leader only): when a master's heartbeats stop, elect from its sync state set.

Event-driven, so the work is proportional to what changed:
* a broker expires (timer wheel) or its channel closes -> if it is its set's master, elect;
* a broker comes back while its set has no live master -> elect (the set may have gone masterless);
* on gaining leadership, one pass over all sets once this process has had a heartbeat-timeout of history,
  so a freshly restarted controller does not fail over brokers it simply has not heard from yet.
At most one election per broker set runs at a time; a trigger during it re-checks when it finishes.
"""

from __future__ import annotations

import asyncio
import time

import structlog

from brokerd.remoting.codes import ResponseCode as RC
from controller.context import ElectorContext
from controller.statemachine.decide_election import elect_master
from controller.statemachine.elect import CONTROLLER_TRIGGER
from controller.statemachine.image import BrokerSet

log = structlog.get_logger(component="controller_elector")

FINAL_CODES = frozenset({
    RC.SUCCESS, RC.CONTROLLER_MASTER_NOT_AVAILABLE, RC.CONTROLLER_MASTER_STILL_EXIST, RC.CONTROLLER_ELECT_MASTER_FAILED,
    RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, RC.CONTROLLER_NOT_LEADER,
})


class Elector:
    def __init__(self, srv: ElectorContext) -> None:
        self.srv = srv
        self.started_at = time.monotonic()
        self.running: dict[str, asyncio.Task[None]] = {}
        self.again: set[str] = set()
        self.grace_until = 0.0
        self._scan: asyncio.Task[None] | None = None
        self._later: dict[str, asyncio.TimerHandle] = {}
        self.elections_won = 0
        self.elections_tried = 0

    @property
    def active(self) -> bool:
        return self.srv.raft.is_leader and time.monotonic() >= self.grace_until

    def on_leadership(self, leader: bool) -> None:
        if self._scan is not None:
            self._scan.cancel()
            self._scan = None
        if not leader:
            return
        grace_s = self.srv.heartbeat_timeout_ms / 1000.0
        self.grace_until = max(time.monotonic(), self.started_at + grace_s)
        log.info("controller_leader_elector_armed", grace_ms=round((self.grace_until - time.monotonic()) * 1000))
        self._scan = asyncio.get_running_loop().create_task(self._scan_after(self.grace_until - time.monotonic()))

    async def _scan_after(self, delay_s: float) -> None:
        if delay_s > 0:
            await asyncio.sleep(delay_s)
        self.scan_all()

    def needs_election(self, bset: BrokerSet) -> bool:
        live = self.srv.live
        if bset.first_time_for_elect:
            return False  # never elected: the brokers elect themselves (spec 6.4 step 3)
        master = bset.master_broker_id
        if master is not None and live.is_alive(bset.name, master):
            return False
        pool = bset.brokers.keys() if self.srv.cfg.enable_elect_unclean_master else bset.sync_state_set
        return any(live.is_alive(bset.name, i) for i in pool) or master is not None

    def scan_all(self) -> None:
        """Full pass over every set (once per leadership change; legacy mode's periodic inactive-master scan)."""
        if not self.srv.raft.is_leader:
            return
        for name, bset in list(self.srv.image.sets.items()):
            if self.needs_election(bset):
                self.trigger(name)

    def on_dead(self, broker_name: str, broker_id: int) -> None:
        if not self.active:
            return
        bset = self.srv.image.get(broker_name)
        if bset is not None and bset.master_broker_id == broker_id:
            log.info("controller_master_inactive", broker_name=broker_name, broker_id=broker_id)
            self.trigger(broker_name)

    def on_revived(self, broker_name: str, broker_id: int) -> None:
        """A broker (re)appeared. A masterless set elects now; a set whose master this controller has not heard
        from gets one heartbeat timeout for the master to show up (brokers of a set start in any order)."""
        if not self.active:
            return
        bset = self.srv.image.get(broker_name)
        if bset is None or bset.first_time_for_elect:
            return
        if bset.master_broker_id is None:
            if self.needs_election(bset):
                self.trigger(broker_name)
        elif broker_id != bset.master_broker_id and not self.srv.live.is_alive(broker_name, bset.master_broker_id):
            self.check_later(broker_name)

    def check_later(self, broker_name: str) -> None:
        if broker_name in self._later:
            return
        delay = self.srv.heartbeat_timeout_ms / 1000.0
        self._later[broker_name] = asyncio.get_running_loop().call_later(delay, self._recheck, broker_name)

    def _recheck(self, broker_name: str) -> None:
        self._later.pop(broker_name, None)
        bset = self.srv.image.get(broker_name)
        if bset is not None and self.active and self.needs_election(bset):
            self.trigger(broker_name)

    def trigger(self, broker_name: str) -> None:
        if broker_name in self.running:
            self.again.add(broker_name)
            return
        task = asyncio.get_running_loop().create_task(self._run(broker_name))
        self.running[broker_name] = task

    async def _run(self, name: str) -> None:
        try:
            for attempt in range(max(1, self.srv.cfg.elect_master_max_retry_count)):
                self.elections_tried += 1
                reply = await self.srv.executor.write(
                    lambda: elect_master(self.srv.image, self.srv.live, name, CONTROLLER_TRIGGER, False,
                                         self.srv.cfg.enable_elect_unclean_master))
                log.info("controller_triggered_election", broker_name=name, code=reply.code,
                         master=reply.header.get("masterBrokerId"), epoch=reply.header.get("masterEpoch"))
                if reply.code == RC.SUCCESS:
                    self.elections_won += 1
                    self.srv.notify_role_change(name)
                if reply.code in FINAL_CODES:
                    return
                await asyncio.sleep(0.05 * (attempt + 1))
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - an election failure must not kill the trigger loop
            log.warning("controller_triggered_election_failed", broker_name=name, error=repr(e))
        finally:
            self.running.pop(name, None)
            if name in self.again:
                self.again.discard(name)
                bset = self.srv.image.get(name)
                if bset is not None and self.active and self.needs_election(bset):
                    self.trigger(name)

    async def stop(self) -> None:
        for handle in self._later.values():
            handle.cancel()
        self._later.clear()
        tasks = list(self.running.values()) + ([self._scan] if self._scan else [])
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
