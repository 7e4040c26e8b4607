#!/usr/bin/env python3
"""Drive the real RocketMQ client (rocketmq-python-cvs 2.1.0.3, C++ core) for integration tests.

Runs in its own venv (.venv-client). Prints one JSON object per line:
  produce: {"sent": i, "status": ..., "msg_id": ..., "offset": ...} then {"sent_ok": n}
  push/pull: {"recv": {...message fields...}} per delivery, then {"recv_ok": n_distinct}
Environment: NAMESRV, TOPIC, GROUP, COUNT, TAG (or TAGS=a,b for round-robin), DELAY_LEVEL, EXPR, TIMEOUT,
FAIL_TIMES (push: answer RECONSUME_LATER for each message until it was delivered FAIL_TIMES+1 times),
FAIL_ALL=1 (push: always fail), START_AT (produce: first index), STOP_AFTER (push: exit after N deliveries),
BODY_SIZE (produce: pad bodies to this many bytes), PACE_MS (produce: pause between sends),
ACCESS_KEY + SECRET_KEY (ACL credentials: set_session_credentials).
"""
import json
import os
import sys
import tempfile
import threading
import time

os.environ.setdefault("ROCKETMQ_CLIENT_LOG_DIR", os.environ.get("LOG_DIR", os.path.join(tempfile.gettempdir(), "rmq-test-client-logs")))
os.makedirs(os.environ["ROCKETMQ_CLIENT_LOG_DIR"], exist_ok=True)

import rocketmq.client as rc  # noqa: E402
from rocketmq.ffi import _CConsumeStatus, dll  # noqa: E402

E = os.environ
NAMESRV = E.get("NAMESRV", "127.0.0.1:9876")  # port-ok: address data, nothing binds it
TOPIC = E.get("TOPIC", "TestTopic")
GROUP = E.get("GROUP", "test_group")
COUNT = int(E.get("COUNT", "10"))
TIMEOUT = float(E.get("TIMEOUT", "60"))
lock = threading.Lock()
out_lock = threading.Lock()


def emit(obj):
    with out_lock:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


def credentials(client):
    if E.get("ACCESS_KEY"):
        client.set_session_credentials(E["ACCESS_KEY"], E.get("SECRET_KEY", ""), "ALIYUN")


def produce():
    p = rc.Producer(E.get("PGROUP", "PID_" + GROUP), timeout=int(E.get("SEND_TIMEOUT_MS", "5000")))
    p.set_namesrv_addr(NAMESRV)
    credentials(p)
    p.start()
    tags = E.get("TAGS", E.get("TAG", "TagA")).split(",")
    start = int(E.get("START_AT", "0"))
    size = int(E.get("BODY_SIZE", "0"))
    delay = int(E.get("DELAY_LEVEL", "0"))
    pace = float(E.get("PACE_MS", "0")) / 1000.0
    ok = 0
    for i in range(start, start + COUNT):
        msg = rc.Message(TOPIC)
        msg.set_keys(f"key-{i}")
        msg.set_tags(tags[i % len(tags)])
        msg.set_property("seq", str(i))
        msg.set_property("color", f"blue-{i % 3}")
        body = f"body-{i}-é✓"
        if size:
            body = body + "x" * max(0, size - len(body.encode()))
        msg.set_body(body)
        if delay:
            msg.set_delay_time_level(delay)
        t0 = time.time()
        try:
            res = p.send_sync(msg)
        except Exception as e:  # noqa: BLE001
            emit({"sent": i, "error": str(e)})
            continue
        emit({"sent": i, "status": res.status.name, "msg_id": res.msg_id, "offset": res.offset,
              "sent_at_ms": int(t0 * 1000)})
        if res.status == rc.SendStatus.OK:
            ok += 1
        if pace:
            time.sleep(pace)  # sleep-ok: client-side pacing in the test client, not synchronisation
    p.shutdown()
    emit({"sent_ok": ok})
    return 0 if ok == COUNT else 1


def text(v):
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


def record(m, deliveries, done):
    props = {k: m.get_property(k) for k in ("seq", "color", "RETRY_TOPIC", "ORIGIN_MESSAGE_ID", "REAL_TOPIC")}
    body = m.body.decode("utf-8", "replace") if isinstance(m.body, bytes) else str(m.body)
    info = {"id": text(m.id), "topic": text(m.topic), "tags": text(m.tags), "keys": text(m.keys), "body": body,
            "queue_id": m.queue_id,
            "offset": m.queue_offset, "reconsume_times": m.reconsume_times, "store_ts": m.store_timestamp,
            "born_ts": m.born_timestamp, "props": {k: text(v) for k, v in props.items()},
            "recv_at_ms": int(time.time() * 1000)}
    with lock:
        deliveries.append(info)
        emit({"recv": info})
        distinct = {(d["props"]["seq"]) for d in deliveries}
        if len(distinct) >= COUNT or (E.get("STOP_AFTER") and len(deliveries) >= int(E["STOP_AFTER"])):
            done.set()


def push():
    c = rc.PushConsumer(GROUP)
    c.set_namesrv_addr(NAMESRV)
    credentials(c)
    if E.get("THREADS"):
        c.set_thread_count(int(E["THREADS"]))
    deliveries, done = [], threading.Event()
    fail_times = int(E.get("FAIL_TIMES", "0"))
    fail_all = E.get("FAIL_ALL") == "1"
    seen_count = {}

    def on_message(consumer, handle):
        try:
            return handle_message(handle)
        except Exception as e:  # noqa: BLE001 - report instead of letting ctypes swallow it
            emit({"callback_error": repr(e)})
            return _CConsumeStatus.RECONSUME_LATER.value

    def handle_message(handle):
        m = rc.RecvMessage(handle)
        record(m, deliveries, done)
        seq = text(m.get_property("seq"))
        with lock:
            seen_count[seq] = seen_count.get(seq, 0) + 1
            n = seen_count[seq]
        if fail_all or n <= fail_times:
            return _CConsumeStatus.RECONSUME_LATER.value
        return _CConsumeStatus.CONSUME_SUCCESS.value

    rc.ffi_check(dll.Subscribe(c._handle, TOPIC.encode(), E.get("EXPR", "*").encode()))
    c._register_callback(on_message)
    c.start()
    done.wait(TIMEOUT)
    if E.get("LINGER_S"):
        time.sleep(float(E["LINGER_S"]))  # sleep-ok: keep the client alive for its 5 s offset-persist timer
    distinct = len({d["props"]["seq"] for d in deliveries})
    emit({"recv_ok": distinct, "deliveries": len(deliveries)})
    # rocketmq-client-cpp 2.1.0 can crash in push-consumer shutdown (fixed upstream in 2.2.0)
    if E.get("CLEAN_SHUTDOWN") == "1":
        c.shutdown()
    os._exit(0 if done.is_set() else 1)


class PullConsumer(rc.PullConsumer):
    """The wrapper keys its offset table by topic@queueId only, so queues of the same id on different brokers
    overwrite each other's offsets; key by broker name too."""

    def _get_mq_key(self, mq):
        return f"{mq.topic}@{mq.brokerName}@{mq.queueId}"


def pull():
    c = PullConsumer(GROUP)
    c.set_namesrv_addr(NAMESRV)
    c.start()
    deliveries, done = [], threading.Event()
    deadline = time.time() + TIMEOUT
    while not done.is_set() and time.time() < deadline:
        got = False
        for m in c.pull(TOPIC, E.get("EXPR", "*")):
            got = True
            record(m, deliveries, done)
        if not got:
            time.sleep(0.1)  # sleep-ok: client-side pacing in the test client, not synchronisation
    emit({"recv_ok": len({d["props"]["seq"] for d in deliveries}), "deliveries": len(deliveries)})
    c.shutdown()
    return 0 if done.is_set() else 1


def txn():
    """Transactional producer through the C++ core's C API (the python wrapper does not expose it).
    OUTCOMES=commit,rollback,unknown,...: message i's local transaction answers OUTCOMES[i]; a broker check-back
    answers CHECK_ANSWER (commit); emits {"sent": i, ...} per message and {"checked": key} per check-back."""
    from ctypes import CFUNCTYPE, POINTER, byref, c_char_p, c_int, c_void_p

    from rocketmq.ffi import _CSendResult

    status = {"commit": 0, "rollback": 1, "unknown": 2}
    outcomes = E.get("OUTCOMES", "commit").split(",")
    check_answer = status[E.get("CHECK_ANSWER", "commit")]
    cb_type = CFUNCTYPE(c_int, c_void_p, c_void_p, c_void_p)
    dll.GetOriginMessageKeys.argtypes = [c_void_p]
    dll.GetOriginMessageKeys.restype = c_char_p
    dll.GetMessageKeys.argtypes = [c_void_p]
    dll.GetMessageKeys.restype = c_char_p

    def execute(producer, msg, data):
        key = dll.GetOriginMessageKeys(msg).decode()
        return status[outcomes[int(key.split("-")[1]) % len(outcomes)]]

    def check(producer, msg_ext, data):
        emit({"checked": dll.GetMessageKeys(msg_ext).decode()})
        return check_answer

    check_cb, exec_cb = cb_type(check), cb_type(execute)  # kept referenced for the producer's lifetime
    dll.CreateTransactionProducer.argtypes = [c_char_p, cb_type, c_void_p]
    dll.CreateTransactionProducer.restype = c_void_p
    dll.SendMessageTransaction.argtypes = [c_void_p, c_void_p, cb_type, c_void_p, POINTER(_CSendResult)]
    dll.SendMessageTransaction.restype = c_int
    for name in ("SetProducerNameServerAddress",):
        getattr(dll, name).argtypes = [c_void_p, c_char_p]
    for name in ("StartProducer", "ShutdownProducer", "DestroyProducer"):
        getattr(dll, name).argtypes = [c_void_p]
    p = dll.CreateTransactionProducer(E.get("PGROUP", "PID_" + GROUP).encode(), check_cb, None)
    dll.SetProducerNameServerAddress(p, NAMESRV.encode())
    dll.StartProducer(p)
    ok = 0
    for i in range(COUNT):
        msg = dll.CreateMessage(TOPIC.encode())
        dll.SetMessageKeys(msg, f"key-{i}".encode())
        dll.SetMessageTags(msg, b"TagA")
        dll.SetMessageProperty(msg, b"seq", str(i).encode())
        dll.SetMessageBody(msg, f"txn-body-{i}".encode())
        res = _CSendResult()
        rc_ = dll.SendMessageTransaction(p, msg, exec_cb, None, byref(res))
        emit({"sent": i, "rc": rc_, "status": res.sendStatus, "msg_id": res.msgId.decode(), "offset": res.offset})
        ok += rc_ == 0
        dll.DestroyMessage(msg)
    emit({"sent_ok": ok})
    deadline = time.time() + float(E.get("LINGER", "0"))  # stay connected to answer check-backs
    while time.time() < deadline:
        time.sleep(0.1)  # sleep-ok: the client lingers for the broker's check-backs, no synchronisation
    dll.ShutdownProducer(p)
    dll.DestroyProducer(p)
    return 0 if ok == COUNT else 1


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "produce"
    sys.exit({"produce": produce, "push": push, "pull": pull, "txn": txn}[mode]())
