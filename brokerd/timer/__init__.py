"""Timer messages (RocketMQ 5, RIP-43; docs/timer.md): a message delivered at any time up to ``timerMaxDelaySec``
ahead, exactly once, through restarts, power loss and failovers.

The commit log is the only truth: a timer message is parked in ``rmq_sys_wheel_timer`` queue 0 with its real topic
and queue in its properties (it replicates like any message), and what has been resolved is recorded by markers in
``rmq_sys_wheel_timer_progress`` queue 0, the firing going out in bracketed synchronous batches (brokerd/logbatch)
whose markers name what they resolved. The timer wheel and timer log are derived from the timer topic like a
consume queue, on the master and on each slave, snapshotted and rebuilt after a crash. Only the master fires.

Modules, the pure ones first:

* ``core``: which send is a timer message, its due time, RocketMQ's refusals, the re-targeting (``classify``,
  ``park``); ``handle``: the recall handle codec; ``deliver``: what a due timer becomes (fired, or rolled);
* ``wheel``: granules, placement and the slot arrays; ``timerlog``: the 48-byte entry codec and the files;
* ``fired``: the resolved set (a chunked bitmap); ``marks``: the marker bodies and their replay (``Progress``);
* ``stats``: counters, the lateness histogram, pending by due time;
* ``index``: the wheel over the timer log, its snapshot; ``replay``: reading the marker queue back (both queues
  are read whole, past the confirm hold, through ``brokerd.locallog``);
* ``firing``: the master's read-ahead, preparation and batches; ``service``: the asyncio driver (``TimerService``:
  follow, fire, roles, snapshots; what the send path calls); ``recall``: RECALL_MESSAGE (370).
"""
