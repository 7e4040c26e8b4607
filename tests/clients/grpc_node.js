#!/usr/bin/env node
// RocketMQ's 5.x Node.js SDK (npm rocketmq-client-nodejs 1.0.x, gRPC) driven by the integration tests: the steps
// of STEPS (JSON) in order, one JSON object per line (the same rows as tests/clients/grpc_client.py).
// Environment: ENDPOINT, STEPS, ACCESS_KEY / SECRET_KEY. NODE_PATH: where scripts/test installed the SDK.
'use strict';
const {
  Producer, SimpleConsumer, PushConsumer, ConsumeResult,
} = require('rocketmq-client-nodejs');
const { TransactionResolution } = require('rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb');

const E = process.env;
const emit = obj => process.stdout.write(JSON.stringify(obj) + '\n');
const sleep = ms => new Promise(r => setTimeout(r, ms));
const silent = E.SDK_LOG ? console : { info() {}, warn() {}, error() {}, debug() {}, trace() {} };

function options(extra) {
  const o = { endpoints: E.ENDPOINT, namespace: '', sslEnabled: false, requestTimeout: 5000, logger: silent, ...extra };
  if (E.ACCESS_KEY) o.sessionCredentials = { accessKey: E.ACCESS_KEY, accessSecret: E.SECRET_KEY || '' };
  return o;
}

function view(m, n) {
  return {
    id: m.messageId, topic: m.topic, tag: m.tag || null, keys: m.keys || [], body: m.body.toString('utf-8'),
    attempt: m.deliveryAttempt, group: m.messageGroup || null, n, at: Date.now(),
  };
}

class Runner {
  constructor() { this.producer = null; this.simple = null; this.checked = new Set(); }

  async producer_(s) {
    const answer = s.checker || 'commit';
    const checker = {
      check: async mv => {
        this.checked.add(mv.messageId);
        emit({ check: mv.messageId });
        return answer === 'commit' ? TransactionResolution.COMMIT
          : answer === 'rollback' ? TransactionResolution.ROLLBACK : TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED;
      },
    };
    // only the first topic is declared: with several, rocketmq-client-nodejs 1.0.8 can wait forever at startup (its
    // first settings answer arrives while its other route queries are still out, before it starts waiting for it);
    // the others are routed at their first send
    this.producer = new Producer(options({ topic: s.topics.slice(0, 1), checker }));
    await this.producer.startup();
  }

  message(s, i) {
    const m = {
      topic: s.topic, body: Buffer.from(`${s.prefix || 'msg'}-${i}`), keys: [`key-${i}`],
      properties: new Map([[ 'seq', String(i) ]]),
    };
    if (s.tag) m.tag = s.tag;
    if (s.group) m.messageGroup = s.group;
    if (s.delay_ms) m.delay = Number(s.delay_ms);
    return m;
  }

  async send(s) {
    const start = Number(s.start || 0);
    for (let i = start; i < start + Number(s.count || 1); i++) {
      try {
        const r = await this.producer.send(this.message(s, i));
        emit({ sent: i, id: r.messageId, recall: r.recallHandle || null, at: Date.now() });
      } catch (e) {
        emit({ send_error: i, error: String(e) });
      }
    }
  }

  async txn(s) {
    const start = Number(s.start || 0);
    for (let i = start; i < start + Number(s.count || 1); i++) {
      const t = this.producer.beginTransaction();
      const r = await this.producer.send(this.message(s, i), t);
      emit({ txn: i, id: r.messageId });
      if ((s.resolution || 'commit') === 'commit') await t.commit();
      else if (s.resolution === 'rollback') await t.rollback();
    }
  }

  async checks(s) {
    const deadline = Date.now() + 1000 * Number(s.timeout || 60);
    while (this.checked.size < Number(s.count) && Date.now() < deadline) await sleep(200);
    await sleep(1000); // the SDK answers the check asynchronously: let it go out before the next step
    emit({ checked: [ ...this.checked ].sort() });
  }

  async simple_(s) {
    this.simple = new SimpleConsumer(options({
      consumerGroup: s.group, awaitDuration: 5000, subscriptions: new Map([[ s.topic, s.expr || '*' ]]),
    }));
    await this.simple.startup();
  }

  async receive(s) {
    const want = Number(s.count || 1);
    const deadline = Date.now() + 1000 * Number(s.timeout || 60);
    const seen = new Set();
    const changed = new Set();
    const counts = new Map();
    while (seen.size < want && Date.now() < deadline) {
      let msgs = [];
      try {
        msgs = await this.simple.receive(16, 1000 * Number(s.invisible_s || 15));
      } catch (e) {
        emit({ receive_error: String(e) });
        await sleep(500);
        continue;
      }
      for (const m of msgs) {
        const n = (counts.get(m.messageId) || 0) + 1;
        counts.set(m.messageId, n);
        emit({ recv: view(m, n) });
        if (s.change_ms && !changed.has(m.messageId)) {
          changed.add(m.messageId);
          await this.simple.changeInvisibleDuration(m, Number(s.change_ms));
          emit({ changed: m.messageId });
          continue;
        }
        await this.simple.ack(m);
        emit({ acked: m.messageId });
        seen.add(m.messageId);
      }
    }
  }

  async push(s) {
    const want = Number(s.count || 1);
    const fails = Number(s.fail_times || 0);
    const counts = new Map();
    const done = new Set();
    let finish;
    const finished = new Promise(r => { finish = r; });
    const consumer = new PushConsumer(options({
      consumerGroup: s.group, subscriptions: new Map([[ s.topic, s.expr || '*' ]]),
      messageListener: {
        async consume(m) {
          const n = (counts.get(m.messageId) || 0) + 1;
          counts.set(m.messageId, n);
          emit({ recv: view(m, n) });
          if (n <= fails) return ConsumeResult.FAILURE;
          done.add(m.messageId);
          if (done.size >= want) finish();
          return ConsumeResult.SUCCESS;
        },
      },
    }));
    await consumer.startup();
    await Promise.race([ finished, sleep(1000 * Number(s.timeout || 60)) ]);
    await sleep(1000); // the last acks go out; not shut down: that waits for the long poll in flight (up to 20 s)
    this.push = consumer;
  }

  async shutdown() {
    if (this.simple) await this.simple.shutdown();
    if (this.producer) await this.producer.shutdown();
    this.simple = this.producer = null;
  }
}

async function main() {
  const runner = new Runner();
  const steps = JSON.parse(E.STEPS);
  const names = { producer: 'producer_', simple: 'simple_' };
  for (let i = 0; i < steps.length; i++) {
    const s = steps[i];
    const t0 = Date.now();
    try {
      await runner[names[s.op] || s.op](s);
      emit({ step: i, op: s.op, done: true, ms: Date.now() - t0 });
    } catch (e) {
      emit({ step: i, op: s.op, done: false, error: String(e && e.stack || e) });
    }
  }
  try { await runner.shutdown(); } catch (e) { emit({ shutdown_error: String(e) }); }
  process.exit(0);
}

main();
