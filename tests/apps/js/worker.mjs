// A JetStream consumer app written with plain nats.js (@nats-io/jetstream), standing
// for a user's app, from the client's README: it binds to an EXISTING durable by
// name (js.consumers.get(stream, name) for pull, js.consumers.getPushConsumer for
// push), never creating one, and double-acks every message (ackAck) before
// writing one line about it.
//
//   node worker.mjs --server URL --stream S --consumer C --mode pull|push --out FILE
//        [--api consume|fetch] [--batch 32] [--expires MS] [--ack-timeout 1.0]
//
// pull: `consume({max_messages: batch})` iterated (the client's own recovery: it
// asks again while the consumer or stream is missing), or with --api fetch a loop of
// `fetch({max_messages: batch, expires})`. --expires (ms, at least 1000): the pull
// request's expiry (default: the client's, 30 s for consume, 30 s for fetch).
// push: the durable's deliver subject and group, `consume()` iterated.
// While the durable does not exist at start it retries every 0.2 s.
// --follow-route (pull with --api fetch): follows the route record
// `route.<S>.<C>` in KV bucket CUTOVER as docs/protocol.md describes for route
// followers: a record names the stream/consumer to fetch from; a deleted or
// purged entry is no record (R1: back home); entries are applied in revision
// order only (R8: an older one, from the initial get or a renewed watch, is
// ignored). Between batches it rebinds where the record says.
//
// Ack: `ackAck()` (+ACK with a reply, waits for the server). It sends only once: a
// second call on the same message resolves false and sends nothing, so a failed
// one (timeout, no responders) is asked again here with a plain request of "+ACK"
// to the message's reply subject, for up to 5 s.
// Lines: {"id", "stream", "seq", "source", "delivered", "consumer", "subject", "t_ms",
// "acked", "ack_error"}; last {"done": true, "handled", "acked", "ack_failed", "route"}.
import { connect } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { parseArgs, output, logger, stopSignal, sleep, ready } from "./common.mjs";

const a = parseArgs(["server", "stream", "consumer", "mode", "out"], { api: "consume", batch: "32", "ack-timeout": "1.0" }, ["follow-route"]);
const follow = a["follow-route"] === true;
if (follow && (a.mode !== "pull" || a.api !== "fetch")) {
  console.error("--follow-route is for --mode pull --api fetch");
  process.exit(2);
}
const log = logger("worker.mjs");
const out = output(a.out);
const stop = stopSignal();
const batch = Number(a.batch), ackTimeout = Number(a["ack-timeout"]) * 1000;
const expires = a.expires ? Number(a.expires) : undefined;

const nc = await connect({ servers: a.server, maxReconnectAttempts: -1, reconnectTimeWait: 200, name: "cutover-test-worker-js" });
const js = jetstream(nc);
let handled = 0, acked = 0, ackFailed = 0;

// The binding the route record asks for (home without one).
const home = [a.stream, a.consumer];
let target = home, lastRev = 0;
function applyRoute(e) {
  if (e.revision <= lastRev) return; // R8
  lastRev = e.revision;
  let next = home;
  if (e.operation === "PUT") {
    try {
      const r = e.json();
      next = [r.stream, r.consumer];
    } catch (err) {
      log(`ignoring a bad route record (rev ${e.revision}): ${err}`);
      return;
    }
  }
  if (next[0] !== target[0] || next[1] !== target[1]) {
    log(`route rev ${e.revision}: ${target.join("/")} -> ${next.join("/")}`);
    target = next;
  }
}
async function followRoute() {
  const key = `route.${a.stream}.${a.consumer}`;
  while (!stop.stopped) {
    try {
      const kv = await new Kvm(nc).open("CUTOVER");
      const e = await kv.get(key);
      if (e) applyRoute(e);
      const w = await kv.watch({ key });
      stop.promise.then(() => w.stop());
      for await (const e of w) applyRoute(e);
    } catch (err) {
      log.limited("route", `route watch failed, retrying: ${err}`);
    }
    if (!stop.stopped) await sleep(200);
  }
}

async function bind(where = home) {
  for (;;) {
    try {
      const c = a.mode === "push"
        ? await js.consumers.getPushConsumer(where[0], where[1])
        : await js.consumers.get(where[0], where[1]);
      await c.info(); // get() of a pull consumer does not look it up by itself
      return c;
    } catch (e) {
      log.limited("bind", `binding ${where.join("/")} failed, retrying: ${e}`);
      if (stop.stopped || where !== target && follow) return null;
      await sleep(200);
    }
  }
}

async function handle(m) {
  const h = m.headers;
  const rec = {
    id: h?.get("Nats-Msg-Id") || null,
    stream: m.info.stream,
    seq: m.seq,
    source: h?.get("Nats-Stream-Source") || null,
    delivered: m.info.deliveryCount,
    consumer: m.info.consumer,
    subject: m.subject,
    t_ms: Date.now(),
  };
  let err = null;
  try {
    await m.ackAck({ timeout: ackTimeout });
  } catch (e) {
    err = String(e);
    const first = Date.now();
    let backoff = 50;
    while (Date.now() - first < 5000) {
      await sleep(backoff);
      backoff = Math.min(backoff * 2, 500);
      try {
        await nc.request(m.reply, "+ACK", { timeout: ackTimeout });
        err = null;
        break;
      } catch (e2) {
        err = String(e2);
      }
    }
  }
  handled++;
  if (err === null) acked++;
  else {
    ackFailed++;
    log.limited("ack", `ack of ${rec.stream}#${rec.seq} (${rec.id}) failed: ${err}`);
  }
  rec.acked = err === null;
  rec.ack_error = err;
  out.line(rec);
}

if (follow) {
  // The record in force before the first fetch (docs/protocol.md: a watch
  // may deliver it later than the first fetch would happen).
  try {
    const e = await (await new Kvm(nc).open("CUTOVER")).get(`route.${a.stream}.${a.consumer}`);
    if (e) applyRoute(e);
  } catch (_) { /* no bucket yet: no record */ }
  followRoute();
}
let c = await bind(target);
if (c) {
  await nc.flush();
  ready();
  log(`bound to ${a.stream}/${a.consumer} (${a.mode}, ${a.mode === "pull" ? a.api : "consume"})`);
  if (a.mode === "pull" && a.api === "fetch") {
    let errors = 0;
    let bound = target;
    while (!stop.stopped) {
      if (follow && bound !== target) {
        const next = await bind(target);
        if (!next) continue;
        c = next;
        bound = target;
        log(`following the route: fetching from ${bound.join("/")}`);
      }
      try {
        const opts = { max_messages: batch };
        if (expires) opts.expires = expires;
        const msgs = await c.fetch(opts);
        for await (const m of msgs) await handle(m);
        if (errors) log(`${a.stream}/${a.consumer} delivering again`);
        errors = 0;
      } catch (e) {
        errors++;
        log.limited("fetch", `fetch from ${a.stream}/${a.consumer} failed (${errors}x): ${e}`);
        await sleep(Math.min(50 * errors, 500));
      }
    }
  } else {
    const opts = a.mode === "pull" ? { max_messages: batch } : {};
    if (expires && a.mode === "pull") opts.expires = expires;
    const msgs = await c.consume(opts);
    (async () => {
      for await (const s of msgs.status()) {
        if (s.type !== "heartbeat" && s.type !== "next" && s.type !== "debug" && s.type !== "flow_control")
          log.limited(`status-${s.type}`, `status: ${JSON.stringify(s)}`);
      }
    })().catch(() => {});
    stop.promise.then(() => msgs.stop());
    try {
      for await (const m of msgs) await handle(m);
    } catch (e) {
      log(`consume ended with an error: ${e}`);
    }
    if (!stop.stopped) log("consume ended by itself");
  }
}
out.line({ done: true, handled, acked, ack_failed: ackFailed, route: follow ? target : [a.stream, a.consumer] });
out.close();
log(`done: handled=${handled} acked=${acked} ack_failed=${ackFailed}`);
await nc.close();
process.exit(0);
