"""POP consumption (RocketMQ 5): the broker hands out messages with receipt handles and an invisible time, takes
acks, and puts what was not acked back (docs/pop.md).

Sans-I/O cores:
  extra_info   RocketMQ's strings: checkpoint strings (POP_CK / extraInfo / receipt handles), the answer's
               startOffsetInfo / msgOffsetInfo / orderCountInfo, POP retry topic names, the BATCH_ACK body
  records      the revive-log records: ``ops`` (acks, checkpoints, renews, resets in order of application, a name
               table, offsets as runs), revive-batch brackets, state chunks; msgpack
  state        ``PopState``: per queue the next pop position, what is in flight and the commit point; FIFO order
               state; every mutation is one operation's effect, so a replay of the log reaches the live state
  allocate     QUERY_ASSIGNMENT's allocation strategies (AVG, AVG_BY_CIRCLE, allocate4Pop)
Over the store (synchronous, no asyncio):
  revive_log   appends to queue 0 of ``rmq_sys_REVIVE_LOG_<cluster>``; rebuild = last STATE snapshot + replay;
               revive batches bracketed by ``brokerd.logbatch`` (exactly-once across a crash or a failover, a cut
               batch's deliveries found by the digests BEGIN carries); reads through ``brokerd.locallog``
  pending      operations applied and not written yet, and the requests waiting for them (written / durable)
  core         ``PopCore``: state + log + the broker (``BrokerContext``): one record per loop turn, offsets,
               snapshots, unblock wake-ups
  popping      one POP: queue order (retry topic share), reads, checkpoints, retry records re-encoded
  reviving     due checkpoints into the retry topic / the DLQ, in bracketed batches
Drivers:
  service      ``PopService``: activation on the master, the revive timer, ``pop`` / ``ack`` / ``renew`` /
               ``reset``, the waits for records (``wait_written``, ``wait_durable``, ``when_durable``): what the
               processors call
  longpoll     parked POP / NOTIFICATION requests, woken by the store's dispatch listener and by unblocks
  *_processor  one module per request family: POP_MESSAGE 200050, ACK_MESSAGE 200051 + BATCH_ACK_MESSAGE 200151,
               CHANGE_MESSAGE_INVISIBLETIME 200053, NOTIFICATION 200054 + POLLING_INFO 200055,
               QUERY_ASSIGNMENT 400 + SET_MESSAGE_REQUEST_MODE 401 + GET_ALL_MESSAGE_REQUEST_MODE 402
  module       ``PopModule``: what ``brokerd/broker.py`` builds, registers (both ports) and drives (roles, stats,
               admin offset resets: ``wrap_admin``)
"""
