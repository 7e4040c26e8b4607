#!/usr/bin/env node
// Drive the ali-ons RocketMQ client (Node) for integration tests; prints one JSON object per line:
//   produce: {"sent": i, "status": ..., "msg_id": ...} or {"sent": i, "error": ...}, then {"sent_ok": n}
//   consume: {"recv": {"topic", "tags", "body", "id"}} per delivery
// Environment: NAMESRV, TOPIC, GROUP, COUNT, TIMEOUT (s), ACCESS_KEY + SECRET_KEY (ACL credentials).
'use strict';

const os = require('os');
const { Producer, Consumer, Message } = require('ali-ons');

const E = process.env;
const mode = process.argv[2];
const count = parseInt(E.COUNT || '10', 10);
const noHttp = { request() { throw new Error('no HTTP name-server lookup: nameSrv is given'); } };
const logger = { info() {}, warn() {}, debug() {}, error(e) { emit({ log_error: String(e && e.message || e) }); } };
const options = {
  httpclient: noHttp,
  nameSrv: E.NAMESRV,
  accessKeyId: E.ACCESS_KEY || undefined,
  accessKeySecret: E.SECRET_KEY || undefined,
  instanceName: `ons-${process.pid}`,
  logger,
  persistConsumerOffsetInterval: 1000,
};
process.env.HOME = process.env.HOME || os.tmpdir();

function emit(obj) { process.stdout.write(JSON.stringify(obj) + '\n'); }

async function produce() {
  const p = new Producer({ ...options, producerGroup: E.PGROUP || `PID_${E.GROUP || 'ons'}`, retryTimesWhenSendFailed: 0 });
  p.on('error', e => emit({ client_error: String(e.message) }));
  await p.ready();
  let ok = 0;
  for (let i = 0; i < count; i++) {
    const msg = new Message(E.TOPIC, 'TagA', `ons-body-${i}`);
    msg.keys = [ `key-${i}` ];
    try {
      const r = await p.send(msg);
      emit({ sent: i, status: r.sendStatus, msg_id: r.msgId });
      if (r.sendStatus === 'SEND_OK') ok++;
    } catch (e) {
      emit({ sent: i, error: String(e.message).slice(0, 300) });
    }
  }
  emit({ sent_ok: ok });
  await p.close();
  return ok === count ? 0 : 1;
}

async function consume() {
  const c = new Consumer({ ...options, consumerGroup: E.GROUP, consumeFromWhere: 'CONSUME_FROM_FIRST_OFFSET' });
  c.on('error', e => emit({ client_error: String(e.message).slice(0, 300) }));
  const seen = new Set();
  let resolve;
  const done = new Promise(r => { resolve = r; });
  c.subscribe(E.TOPIC, '*', async msg => {
    emit({ recv: { topic: msg.topic, tags: msg.tags, body: msg.body.toString(), id: msg.msgId } });
    seen.add(msg.msgId);
    if (seen.size >= count) resolve();
  });
  await c.ready();
  const timer = setTimeout(resolve, parseFloat(E.TIMEOUT || '60') * 1000);
  await done;
  clearTimeout(timer);
  await new Promise(r => setTimeout(r, parseFloat(E.LINGER_S || '0') * 1000));
  emit({ recv_ok: seen.size });
  await c.close();
  return seen.size >= count ? 0 : 1;
}

(mode === 'produce' ? produce() : consume()).then(code => process.exit(code), e => {
  emit({ fatal: String(e && e.stack || e).slice(0, 500) });
  process.exit(2);
});
