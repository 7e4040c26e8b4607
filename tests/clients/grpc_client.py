#!/usr/bin/env python3
"""Drive RocketMQ's 5.x Python SDK (PyPI rocketmq-python-client 5.1.x, gRPC) for integration tests.

Runs in its own venv (.venv-client5, scripts/test). One process runs the steps of ``STEPS`` (a JSON list) in
order and prints one JSON object per line: each step's results, then {"step": i, "done": true, ...}.
Environment: ENDPOINT (host:port of the gRPC endpoint), STEPS, ACCESS_KEY / SECRET_KEY (Credentials).

Steps ({"op": ...}):
  producer   {"topics": [...], "checker": "commit"|"rollback"|"unknown"}  start a producer (transaction checker)
  send       {"topic", "count", "start", "tag", "keys", "group" (message group), "delay_ms", "body_size"}
             -> {"sent": i, "id", "offset", "recall"} (or {"send_error": i, "error"})
  recall     {"topic", "handle" (default: the last send's)} -> {"recalled": id} or {"recall_error"}
  txn        {"topic", "start", "count", "resolution": "commit"|"rollback"|"none"} -> {"txn": i, "id"}
  checks     {"count", "timeout"} wait for the checker's calls -> {"checked": [ids]}
  simple     {"group", "topic", "expr", "await_s"}  start a SimpleConsumer
  receive    {"count", "timeout", "invisible_s", "batch", "ack", "change_ms", "change_once", "ack_after_change"}
             -> {"recv": {...}} per delivery (until ``count`` distinct ids or ``timeout``)
  push       {"group", "topic", "expr", "count", "timeout", "fail_times"} a PushConsumer until ``count`` consumed
  shutdown   stop everything started
"""
import json
import os
import sys
import threading
import time

import rocketmq as r
from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)

E = os.environ
out_lock = threading.Lock()


def emit(obj):
    with out_lock:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


def config():
    creds = Credentials(E["ACCESS_KEY"], E.get("SECRET_KEY", "")) if E.get("ACCESS_KEY") else Credentials()
    return ClientConfiguration(E["ENDPOINT"], creds, request_timeout=int(E.get("REQUEST_TIMEOUT", "5")))


def view(m, extra=None):
    d = {"id": m.message_id, "topic": m.topic, "tag": m.tag, "keys": list(m.keys or []),
         "body": (m.body or b"").decode(errors="replace"), "attempt": m.delivery_attempt,
         "group": m.message_group, "props": dict(m.properties or {}), "born": m.born_timestamp,
         "delivery": m.delivery_timestamp, "at": int(time.time() * 1000)}
    d.update(extra or {})
    return d


class Checker(TransactionChecker):
    def __init__(self, answer):
        self.answer = answer
        self.checked = []

    def check(self, message):
        self.checked.append(message.message_id)
        emit({"check": message.message_id})
        return {"commit": TransactionResolution.COMMIT, "rollback": TransactionResolution.ROLLBACK}.get(
            self.answer, TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED)


class Runner:
    def __init__(self):
        self.producer = None
        self.checker = None
        self.simple = None
        self.push = None
        self.last_recall = None

    def op_producer(self, s):
        self.checker = Checker(s.get("checker", "commit"))
        self.producer = Producer(config(), tuple(s["topics"]), self.checker)
        self.producer.startup()

    def _message(self, s, i):
        m = Message()
        m.topic = s["topic"]
        body = f"{s.get('prefix', 'msg')}-{i}"
        size = int(s.get("body_size", 0))
        m.body = (body + "x" * max(0, size - len(body))).encode()
        if s.get("tag"):
            m.tag = s["tag"]
        m.keys = f"key-{i}"
        if s.get("group"):
            m.message_group = s["group"]
        if s.get("delay_ms"):  # this SDK takes the delivery time in seconds
            m.delivery_timestamp = int(time.time()) + -(-int(s["delay_ms"]) // 1000)
        m.add_property("seq", str(i))  # what the 4.x client of tests/clients/rmq_client.py counts deliveries by
        for k, v in (s.get("props") or {}).items():
            m.add_property(k, v)
        return m

    def op_send(self, s):
        start = int(s.get("start", 0))
        for i in range(start, start + int(s.get("count", 1))):
            try:
                rec = self.producer.send(self._message(s, i))
            except Exception as e:  # noqa: BLE001 - reported to the test
                emit({"send_error": i, "error": str(e)})
                continue
            self.last_recall = getattr(rec, "recall_handle", None)
            emit({"sent": i, "id": rec.message_id, "offset": getattr(rec, "offset", None),
                  "recall": self.last_recall, "at": int(time.time() * 1000),
                  "deliver_at": (int(s["delay_ms"]) and (int(time.time()) + -(-int(s["delay_ms"]) // 1000)) * 1000)
                  if s.get("delay_ms") else None})

    def op_recall(self, s):
        handle = self.last_recall if s.get("handle", "last") == "last" else s["handle"]
        try:
            emit({"recalled": self.producer.recall_message(s["topic"], handle)})
        except Exception as e:  # noqa: BLE001
            emit({"recall_error": str(e)})

    def op_txn(self, s):
        start = int(s.get("start", 0))
        for i in range(start, start + int(s.get("count", 1))):
            t = self.producer.begin_transaction()
            rec = self.producer.send(self._message(s, i), t)
            emit({"txn": i, "id": rec.message_id})
            res = s.get("resolution", "commit")
            if res == "commit":
                t.commit()
            elif res == "rollback":
                t.rollback()

    def op_checks(self, s):
        deadline = time.time() + float(s.get("timeout", 60))
        while len(set(self.checker.checked)) < int(s["count"]) and time.time() < deadline:
            time.sleep(0.2)  # sleep-ok: polling the checker's record until the deadline
        # the SDK sends the checker's answer (EndTransaction) from a callback: let it go out before the next step
        time.sleep(1.0)  # sleep-ok: no hook tells when the SDK's asynchronous EndTransaction was sent
        emit({"checked": sorted(set(self.checker.checked))})

    def op_simple(self, s):
        sub = {s["topic"]: FilterExpression(s.get("expr", "*"))}
        self.simple = SimpleConsumer(config(), s["group"], sub, int(s.get("await_s", 5)))
        self.simple.startup()

    def op_receive(self, s):
        want, seen, changed = int(s.get("count", 1)), set(), set()
        deadline = time.time() + float(s.get("timeout", 60))
        while len(seen) < want and time.time() < deadline:
            try:
                msgs = self.simple.receive(int(s.get("batch", 16)), int(s.get("invisible_s", 15)))
            except Exception as e:  # noqa: BLE001
                emit({"receive_error": str(e)})
                time.sleep(0.5)  # sleep-ok: a pause before receiving again, as an application would
                continue
            for m in msgs or []:
                emit({"recv": view(m)})
                if s.get("change_ms") and (m.message_id not in changed or not s.get("change_once", True)):
                    changed.add(m.message_id)
                    self.simple.change_invisible_duration(m, int(s["change_ms"]) // 1000 or 1)
                    emit({"changed": m.message_id})
                    if not s.get("ack_after_change"):
                        continue
                if s.get("ack", True):
                    self.simple.ack(m)
                    emit({"acked": m.message_id})
                seen.add(m.message_id)

    def op_push(self, s):
        done = threading.Event()
        counts = {}
        want, fails = int(s.get("count", 1)), int(s.get("fail_times", 0))

        class Listener(MessageListener):
            def consume(self, message):
                n = counts.get(message.message_id, 0) + 1
                counts[message.message_id] = n
                emit({"recv": view(message, {"n": n})})
                if n <= fails:
                    return ConsumeResult.FAILURE
                if sum(1 for v in counts.values() if v > fails) >= want:
                    done.set()
                return ConsumeResult.SUCCESS

        sub = {s["topic"]: FilterExpression(s.get("expr", "*"))}
        self.push = PushConsumer(config(), s["group"], Listener(), sub)
        self.push.startup()
        done.wait(float(s.get("timeout", 60)))
        time.sleep(1)  # sleep-ok: let the last acks go out before the consumer stops
        self.push.shutdown()
        self.push = None

    def op_shutdown(self, s):
        for c in (self.simple, self.push, self.producer):
            if c is not None:
                c.shutdown()
        self.simple = self.push = self.producer = None


def main():
    runner = Runner()
    steps = json.loads(E["STEPS"])
    for i, s in enumerate(steps):
        t0 = time.time()
        try:
            getattr(runner, "op_" + s["op"])(s)
            emit({"step": i, "op": s["op"], "done": True, "ms": int((time.time() - t0) * 1000)})
        except Exception as e:  # noqa: BLE001 - reported, the next steps still run
            emit({"step": i, "op": s["op"], "done": False, "error": f"{type(e).__name__}: {e}"})
    try:
        runner.op_shutdown({})
    except Exception as e:  # noqa: BLE001
        emit({"shutdown_error": str(e)})
    sys.stdout.flush()
    os._exit(0)  # the SDK's threads do not always end by themselves


if __name__ == "__main__":
    del r
    main()
