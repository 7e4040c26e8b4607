"""Server-side queue assignment (QUERY_ASSIGNMENT): RocketMQ's allocation strategies and QueryAssignmentProcessor's
POP variant, pure.

Queues are ``(topic, broker name, queue id)`` sorted as MessageQueue.compareTo sorts them, client ids sorted;
``AVG`` (AllocateMessageQueueAveragely) and ``AVG_BY_CIRCLE`` are the strategies the Java client names. In POP
mode every client shares queues: with ``popShareQueueNum`` <= 0 (or >= clients - 1) each client gets every
queue as queue id -1 (pop from all the broker's queues), else its own share plus the shares of the next
``popShareQueueNum`` clients.
"""

from __future__ import annotations

from collections.abc import Callable

MQ = tuple[str, str, int]  # topic, broker name, queue id


class AllocateError(ValueError):
    pass


def _check(cid: str, mqs: list[MQ], cids: list[str]) -> bool:
    if not cid:
        raise AllocateError("currentCID is empty")
    if not mqs:
        raise AllocateError("mqAll is null or mqAll empty")
    if not cids:
        raise AllocateError("cidAll is null or cidAll empty")
    return cid in cids


def averagely(cid: str, mqs: list[MQ], cids: list[str]) -> list[MQ]:
    if not _check(cid, mqs, cids):
        return []
    index, n, m = cids.index(cid), len(mqs), len(cids)
    mod = n % m
    size = 1 if n <= m else (n // m + 1 if mod > 0 and index < mod else n // m)
    start = index * size if mod > 0 and index < mod else index * size + mod
    return [mqs[start + i] for i in range(min(size, n - start))]


def averagely_by_circle(cid: str, mqs: list[MQ], cids: list[str]) -> list[MQ]:
    if not _check(cid, mqs, cids):
        return []
    index = cids.index(cid)
    return [mqs[i] for i in range(index, len(mqs)) if i % len(cids) == index]


STRATEGIES: dict[str, Callable[[str, list[MQ], list[str]], list[MQ]]] = {
    "AVG": averagely, "AVG_BY_CIRCLE": averagely_by_circle}


def allocate_for_pop(strategy: Callable[[str, list[MQ], list[str]], list[MQ]], cid: str, mqs: list[MQ],
                     cids: list[str], share: int) -> list[MQ]:  # fmt: skip
    """QueryAssignmentProcessor.allocate4Pop."""
    if share <= 0 or share >= len(cids) - 1:
        return list(dict.fromkeys((t, b, -1) for t, b, _ in mqs))
    if len(cids) <= len(mqs):
        out = strategy(cid, mqs, cids)
        if cid in cids:
            index = cids.index(cid)
            for _ in range(share):
                index = (index + 1) % len(cids)
                out += strategy(cids[index], mqs, cids)
        return out
    _check(cid, mqs, cids)
    return [mqs[cids.index(cid) % len(mqs)]] if cid in cids else []


def assign(strategy_name: str, cid: str, mqs: list[MQ], cids: list[str], pop: bool, share: int) -> list[MQ] | None:
    """The queues of ``cid`` (None: no answer — an unknown strategy, or nothing to allocate)."""
    strategy = STRATEGIES.get(strategy_name)
    if strategy is None:
        return None
    mqs, cids = sorted(mqs), sorted(cids)
    try:
        return allocate_for_pop(strategy, cid, mqs, cids, share) if pop else strategy(cid, mqs, cids)
    except AllocateError:
        return None
