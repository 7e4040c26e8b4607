"""The real RocketMQ client (C++ core, ``tests/clients/rmq_client.py`` in ``$ROCKETMQ_CLIENT_PYTHON`` /
``.venv-client``) as one more producer: every ``send_sync`` it acknowledges becomes an acknowledged ``Send``
with id ``rc-<i>`` (the ``seq`` property the read-back finds). It finds brokers through the name server, so
in proxy mode it bypasses the proxies (docs/chaos.md)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.support import CLIENT_PY, ClientRun

from .history import History, Send
from .workload import RC_TOPIC


def available() -> bool:
    return os.path.exists(CLIENT_PY)


class RealProducer:
    def __init__(self, namesrv: str, bset: str, log_dir: Path, t0: float, count: int = 1_000_000) -> None:
        env = {"NAMESRV": namesrv, "TOPIC": RC_TOPIC, "GROUP": "ChaosRCGroup", "COUNT": count, "SEND_TIMEOUT_MS": 3000}
        self.bset, self.t0 = bset, t0
        self.wall_t0 = time.time() - (time.monotonic() - t0)
        self.run = ClientRun("produce", env, log_dir)

    def stop(self, h: History) -> None:
        """Stop the client and add its sends to the history."""
        self.run.kill()
        _rc, rows = self.run.wait(10)
        for arrived, row in zip(self.run.arrived, rows, strict=True):
            ret = arrived - self.t0
            if "sent" not in row:
                continue
            call = row.get("sent_at_ms", 0) / 1000 - self.wall_t0 if "sent_at_ms" in row else ret
            ok = row.get("status") in ("OK", "SEND_OK")
            h.sends.append(Send(f"rc-{row['sent']}", self.bset, RC_TOPIC, "rc", int(row["sent"]), -1, call,
                                ret if ok or "status" in row else None, ok))
