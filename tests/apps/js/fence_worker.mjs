// A pull-consumer app that follows docs/protocol.md in fence and rolling
// mode, written with plain nats.js 3.4 (@nats-io/transport-node, jetstream,
// kv) from that page alone (its *Rules in detail*), not from our library.
//
//   node fence_worker.mjs --server URL --stream S --consumer C --instance ID --out FILE
//        [--app-version V] [--batch 32] [--expires 1] [--ttl 5]
//        [--work-ms 0] [--lose-acks 0] [--stop-at 0]
//
// The same flags and output as tests/apps/fence_worker.py (tests/apps/README.md):
// it registers as inst.S.C.ID in KV bucket CUTOVER (heartbeat every second,
// removed on SIGTERM), watches route.S.C, fetches from the old and the new
// consumer in two concurrent loops, naks an old-consumer message above the
// fence (with the record's nak_delay_ms) without processing it, and
// acknowledges the fence in its registration once the rule is in force.
// Acks are double acks, retried by sending `+ACK` again (JsMsg.ackAck() sends
// nothing on a second call: protocol.md, *The double ack*).
//
// Extra flags for the conformance check: --work-ms, time spent "processing"
// each message (an instance killed then holds messages up to the fence);
// --lose-acks N, the first attempt of every N-th double ack is not sent (a
// lost ack or a lost reply: the retry must send it again); --stop-at N, the
// process stops itself (SIGSTOP) in the middle of processing its N-th message.
//
// The registration is its lease (R15): when a write of it is taken after the
// record may have been ttl old (the process was stopped, the bucket out of
// reach), everything fetched before is dropped unanswered and the route read
// again before the next fetch.
// --break RULE makes it break one rule on purpose, to see the check fail:
// `ackack-retry` retries the double ack with m.ackAck() (which sends nothing
// the second time), `parse-deleted` parses a deleted route entry as JSON.
//
// Lines (--out), per processed message: {"begin", "stream", "seq"} before its
// ack, {"id", "stream", "seq", "delivered", "instance", "acked", "t_ms"} once
// its ack attempts are over; last {"done": true, "processed", "acked", "fenced_off",
// "dropped_lapsed"}. stdout: `ready`.
// Logs go to stderr.
import { connect } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { openSync, writeSync, closeSync } from "node:fs";

const BUCKET = "CUTOVER";
const ACK_RETRY_FOR_MS = 5000;
const te = new TextEncoder();

// ---- flags -----------------------------------------------------------------

const args = { appVersion: "js-1", batch: 32, expires: 1, ttl: 5, workMs: 0, loseAcks: 0, stopAt: 0, break: "" };
const names = {
  server: "server", stream: "stream", consumer: "consumer", instance: "instance", out: "out",
  "app-version": "appVersion", batch: "batch", expires: "expires", ttl: "ttl",
  "work-ms": "workMs", "lose-acks": "loseAcks", "stop-at": "stopAt", break: "break",
};
for (let i = 2; i < process.argv.length; i++) {
  const k = names[process.argv[i].replace(/^--/, "")];
  if (!k) {
    console.error(`unknown flag ${process.argv[i]}`);
    process.exit(2);
  }
  args[k] = process.argv[++i];
}
for (const k of ["server", "stream", "consumer", "instance", "out"]) {
  if (!args[k]) {
    console.error(`--${k} is required`);
    process.exit(2);
  }
}
for (const k of ["batch", "expires", "ttl", "workMs", "loseAcks", "stopAt"]) args[k] = Number(args[k]);
args.appVersion = String(args.appVersion); // app_version is a JSON string, always
// Instance ids are one KV key token (no dots: a host name must be mapped).
if (!/^[A-Za-z0-9_-]+$/.test(args.instance)) {
  console.error("--instance must be letters, digits, _ and - (one KV key token)");
  process.exit(2);
}
// nats.js refuses a pull request that expires in under 1 s; the old
// consumer's must not wait longer than 1 s.
const oldExpiresMs = 1000;
const newExpiresMs = Math.max(1000, Math.round(args.expires * 1000));

const ts = () => new Date().toISOString().slice(11, 23);
const log = (...p) => console.error(ts(), `fence_worker[${args.instance}]:`, ...p);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---- the route record --------------------------------------------------------

const STATES = new Set(["fenced", "settled", "moved"]);
const MODES = new Set(["drain", "fence", "rolling"]);
const isSeq = (v) => Number.isSafeInteger(v) && v >= 0;
const isName = (v) => typeof v === "string" && v.length > 0;

// The record as the page defines it, or a reason it is not one.
function parseRoute(text) {
  let r;
  try {
    r = JSON.parse(text);
  } catch (e) {
    return { bad: `not JSON: ${e.message}` };
  }
  if (r === null || typeof r !== "object" || Array.isArray(r)) return { bad: "not an object" };
  if (!isName(r.stream) || !isName(r.consumer)) return { bad: "no stream/consumer" };
  const version = r.version ?? 1;
  if (!Number.isInteger(version)) return { bad: "version not an integer" };
  const mode = r.mode ?? "drain";
  const state = r.state ?? "moved";
  if (!MODES.has(mode)) return { bad: `unknown mode ${JSON.stringify(mode)}` };
  if (!STATES.has(state)) return { bad: `unknown state ${JSON.stringify(state)}` };
  if (mode !== "drain") {
    if (!isSeq(r.fence)) return { bad: `mode ${mode} without an integer fence` };
    if (typeof r.migration !== "string") return { bad: "no migration" };
  }
  if (mode === "rolling" && typeof r.new_version !== "string") {
    return { bad: "mode rolling without a string new_version" };
  }
  return { route: { ...r, version, mode, state } };
}

// {migration, fence} the old consumer's messages are held to, or null.
function fenceOf(route) {
  if (!route || route.mode === "drain") return null;
  return { migration: route.migration, fence: route.fence };
}

// [old, new] bindings ("stream/consumer" pairs as arrays) to fetch from.
function targets(route, home, appVersion) {
  if (!route) return [home, null];
  const nw = [route.stream, route.consumer];
  const old = [route.old_stream || home[0], route.old_consumer || home[1]];
  if (route.mode === "rolling" && route.new_version !== appVersion) return [old, null];
  if (route.version < 2 || route.mode === "drain" || route.state === "moved") return [null, nw];
  return [route.state === "fenced" ? old : null, route.ordered && route.state === "fenced" ? null : nw];
}

const same = (a, b) => (a === null && b === null) || (a !== null && b !== null && a[0] === b[0] && a[1] === b[1]);
const sameFence = (a, b) => a !== null && b !== null && a.migration === b.migration && a.fence === b.fence;

// ---- the instance -----------------------------------------------------------

class App {
  constructor() {
    this.home = [args.stream, args.consumer];
    this.route = null;
    this.routeRev = 0; // revision of the last route entry applied
    this.routeWaiters = [];
    this.stopping = false;
    this.key = `inst.${args.stream}.${args.consumer}.${args.instance}`;
    this.record = {
      version: 1,
      instance: args.instance,
      app_version: args.appVersion,
      lang: "javascript",
      stream: args.stream,
      consumer: args.consumer,
      bound: [],
      fence_ack: null,
      ttl_ms: Math.round(args.ttl * 1000),
      heartbeat_ms: Date.now(),
    };
    this.bound = { old: null, new: null };
    this.writes = Promise.resolve(); // registration writes, one at a time
    this.applies = Promise.resolve(); // route entries, one at a time
    this.processed = this.acked = this.fencedOff = this.dropped = 0;
    this.acks = 0; // double acks begun
    // The lease (R15): when the last write the server took began (monotonic
    // ms), and how often the record may have been ttl old before the next.
    // On both clocks: the monotonic one may stand still while a VM is paused.
    this.written = performance.now();
    this.writtenWall = Date.now();
    this.epoch = 0;
    this.reread = false;
    this.rereading = null;
  }

  // Every write of the registration goes through here, in order, each from the
  // record as it is when its turn comes: a heartbeat never lands an older copy
  // over a fence acknowledgement.
  writeRecord() {
    const w = this.writes.then(async () => {
      const start = performance.now();
      const startWall = Date.now();
      this.record.heartbeat_ms = Date.now();
      await this.kv.put(this.key, JSON.stringify(this.record));
      if (this.leaseAge() >= args.ttl * 1000) {
        // The runner may have counted this instance dead in between.
        this.epoch++;
        this.reread = true;
        log(`registration lapsed (epoch ${this.epoch}): dropping what was fetched before`);
      }
      if (start > this.written) [this.written, this.writtenWall] = [start, startWall];
    });
    this.writes = w.catch(() => {});
    return w;
  }

  leaseAge() {
    return Math.max(performance.now() - this.written, Date.now() - this.writtenWall);
  }

  // The lease's epoch, confirmed: the record is written first when half its
  // ttl passed since the last write began (again until the server takes it).
  async lease() {
    while (this.leaseAge() >= args.ttl * 500) {
      try {
        await this.writeRecord();
      } catch (e) {
        log("registration:", e.message);
        await sleep(100);
      }
    }
    return this.epoch;
  }

  // After a lapse: the route as the bucket has it now, before either loop
  // fetches again (the watch may still deliver what was written meanwhile;
  // older entries are skipped by revision, R8).
  async rereadRoute() {
    this.rereading ??= (async () => {
      try {
        await this.applyEntry(await this.kv.get(`route.${this.home[0]}.${this.home[1]}`));
        this.reread = false;
      } catch (e) {
        log("reading the route again:", e.message);
        await sleep(100);
      } finally {
        this.rereading = null;
      }
    })();
    await this.rereading;
  }

  async heartbeat() {
    while (!this.stopping) {
      try {
        await this.writeRecord();
      } catch (e) {
        log("heartbeat:", e.message);
      }
      await sleep(1000);
    }
  }

  // One KV entry of route.S.C, from the get or the watch, in revision order.
  applyEntry(e) {
    const a = this.applies.then(() => this.apply(e));
    this.applies = a.catch((err) => log("applying the route:", err.message));
    return a;
  }

  async apply(e) {
    if (e === null) return; // the key was never written: no record
    if (e.revision <= this.routeRev) return; // older than what is in force
    this.routeRev = e.revision;
    let route = null;
    if ((e.operation === "DEL" || e.operation === "PURGE") && args.break !== "parse-deleted") {
      route = null; // deleted or purged: no record (a rollback), never JSON
    } else {
      const p = parseRoute(e.string());
      if (p.bad) {
        log(`ignoring route revision ${e.revision} (${p.bad}); keeping the current one`);
        return;
      }
      route = p.route;
    }
    // In force before anything else runs: every old message handled from here
    // on is checked against its fence (the check is made just before processing).
    this.route = route;
    for (const w of this.routeWaiters.splice(0)) w();
    const fence = fenceOf(route);
    if (fence !== null && !sameFence(fence, this.record.fence_ack)) {
      this.record.fence_ack = fence;
      await this.writeRecord();
      log(`acknowledged fence ${JSON.stringify(fence)} (revision ${e.revision}, ${route.state})`);
    } else if (route) {
      log(`route revision ${e.revision}: ${route.mode}/${route.state}`);
    } else {
      log(`route revision ${e.revision}: removed (${e.operation})`);
    }
  }

  routeChanged(ms) {
    return new Promise((resolve) => {
      const t = setTimeout(resolve, ms);
      this.routeWaiters.push(() => {
        clearTimeout(t);
        resolve();
      });
    });
  }

  async watchRoute() {
    const key = `route.${this.home[0]}.${this.home[1]}`;
    while (!this.stopping) {
      try {
        this.watcher = await this.kv.watch({ key });
        // A watch set up again may have missed changes: read the key too.
        await this.applyEntry(await this.kv.get(key));
        for await (const e of this.watcher) {
          await this.applyEntry(e);
        }
      } catch (e) {
        log("route watch failed, setting it up again:", e.message);
      }
      if (!this.stopping) await sleep(200);
    }
  }

  // ---- fetching -------------------------------------------------------------

  async setBound(role, binding) {
    if (same(this.bound[role], binding)) return;
    this.bound[role] = binding;
    this.record.bound = Object.values(this.bound).filter((b) => b).map((b) => `${b[0]}/${b[1]}`);
    await this.writeRecord();
  }

  async fetchLoop(role) {
    let consumer = null;
    let consumerOf = null;
    let lastErr = 0;
    const expires = role === "old" ? oldExpiresMs : newExpiresMs;
    while (!this.stopping) {
      const want = targets(this.route, this.home, args.appVersion)[role === "old" ? 0 : 1];
      // A binding leaves `bound` only here: the previous fetch is over and
      // every message it delivered was handled.
      try {
        await this.setBound(role, want);
      } catch (e) {
        log("registration:", e.message);
      }
      if (want === null) {
        await this.routeChanged(50);
        continue;
      }
      try {
        if (!same(consumerOf, want)) {
          consumer = await this.js.consumers.get(want[0], want[1]);
          consumerOf = want;
        }
        // The lease first (R15), then the route as the pull request goes
        // out: what it brings stays held to this fence even if a rollback
        // deletes the route before it is handled (docs/protocol.md R14).
        const epoch = await this.lease();
        if (this.reread) {
          await this.rereadRoute();
          continue;
        }
        const under = this.route;
        const iter = await consumer.fetch({ max_messages: args.batch, expires });
        for await (const m of iter) {
          if (!(await this.handle(m, role, under, epoch))) {
            this.dropped++;
            break; // the rest of the batch is dropped with it
          }
        }
      } catch (e) {
        // Consumer not found / deleted (after `moved`, or a rollback's new
        // durable), a leader change, a lost connection: never fatal.
        consumer = consumerOf = null;
        if (Date.now() - lastErr > 2000) {
          log(`fetch ${want.join("/")}: ${e.name}: ${e.message}`);
          lastErr = Date.now();
        }
        await this.routeChanged(100);
      }
    }
  }

  // ---- one message ----------------------------------------------------------

  // False when the lease lapsed since the message was fetched: dropped.
  async handle(m, role, under, epoch) {
    const seq = m.info.streamSequence;
    // The fence now, and the one in force when it was fetched.
    for (const route of [this.route, under]) {
      const fence = fenceOf(route);
      if (role === "old" && fence !== null && seq > fence.fence) {
        // Above the fence: the new durable delivers it. Never process it here,
        // never ack or term it: nak with the record's delay (ms in nats.js).
        if ((await this.lease()) !== epoch) return false;
        m.nak(Math.max(route.nak_delay_ms || 0, 1000));
        this.fencedOff++;
        return true;
      }
    }
    if (args.stopAt && this.processed + 1 === args.stopAt) {
      args.stopAt = 0;
      log(`stopping in the middle of message ${this.processed + 1} (SIGSTOP), messages in hand`);
      process.kill(process.pid, "SIGSTOP");
    }
    if (args.workMs > 0) await sleep(args.workMs);
    // The effect (here the ack and the records) only under the lease the
    // message was fetched under (R15).
    if ((await this.lease()) !== epoch) return false;
    const id = m.headers?.get("Nats-Msg-Id") || null;
    // Processed; its ack under way (an instance killed now may or may not
    // have acknowledged it: the check counts this line for a killed one).
    this.line({ begin: id, stream: m.info.stream, seq });
    const acked = await this.doubleAck(m);
    this.processed++;
    if (acked) this.acked++;
    this.line({
      id,
      stream: m.info.stream,
      seq,
      delivered: m.info.deliveryCount,
      instance: args.instance,
      acked,
      t_ms: Date.now(),
    });
    return true;
  }

  // +ACK with a reply, waiting for the server, sent again on a timeout or "no
  // responders" for up to 5 s (backoff 20 ms doubling to 500 ms). Not
  // m.ackAck() in a loop: it marks the message acked before sending, and a
  // second call resolves false without sending anything.
  async doubleAck(m) {
    const started = Date.now();
    const lose = args.loseAcks > 0 && ++this.acks % args.loseAcks === 0;
    let backoff = 20;
    for (let attempt = 1; ; attempt++) {
      try {
        if (lose && attempt === 1) {
          // As ackAck() leaves a message whose +ACK was lost: marked acked.
          if (args.break === "ackack-retry") m.didAck = true;
          throw Object.assign(new Error("simulated lost ack"), { name: "TimeoutError" });
        }
        if (args.break === "ackack-retry") {
          await m.ackAck({ timeout: 1000 }); // resolves false, sending nothing, from the 2nd call on
          return true;
        }
        await this.nc.request(m.reply, te.encode("+ACK"), { timeout: 1000 });
        return true;
      } catch (e) {
        const noResponders = typeof e.isNoResponders === "function" && e.isNoResponders();
        if (noResponders && (await this.consumerGone(m))) {
          log(`ack of ${m.info.stream} ${m.info.streamSequence}: its consumer is gone; processed, not acknowledged`);
          return false;
        }
        if (Date.now() - started >= ACK_RETRY_FOR_MS) {
          log(`ack of ${m.info.stream} ${m.info.streamSequence} unconfirmed after ${attempt} attempts (${e.message}): it may be delivered again`);
          return false;
        }
        await sleep(backoff);
        backoff = Math.min(backoff * 2, 500);
      }
    }
  }

  async consumerGone(m) {
    try {
      await this.jsm.consumers.info(m.info.stream, m.info.consumer);
      return false;
    } catch (e) {
      return e.name === "ConsumerNotFoundError" || e.name === "StreamNotFoundError";
    }
  }

  line(o) {
    writeSync(this.fd, JSON.stringify(o) + "\n");
  }

  // ---- main -----------------------------------------------------------------

  // Kvm.open() binds without asking the server: a missing bucket shows only at
  // the first get (StreamNotFoundError). Ask for the bucket's stream first.
  async openBucket() {
    const kvm = new Kvm(this.nc);
    try {
      await this.jsm.streams.info(`KV_${BUCKET}`);
    } catch (e) {
      if (e.name !== "StreamNotFoundError") throw e;
      log(`no bucket ${BUCKET}: creating it (history 1, file storage)`);
      try {
        await kvm.create(BUCKET, { history: 1, storage: "file" });
      } catch (e2) {
        log("creating the bucket:", e2.message, "(another instance or the runner may have)");
      }
    }
    return await kvm.open(BUCKET);
  }

  async run() {
    this.fd = openSync(args.out, "a");
    this.nc = await connect({ servers: args.server, maxReconnectAttempts: -1 });
    this.js = jetstream(this.nc, { timeout: 2000 });
    this.jsm = await jetstreamManager(this.nc);
    this.kv = await this.openBucket();
    // Read the record, act on it, then watch: before the first fetch.
    const key = `route.${this.home[0]}.${this.home[1]}`;
    await this.applyEntry(await this.kv.get(key));
    await this.writeRecord();
    const stop = () => {
      if (this.stopping) return;
      this.stopping = true;
      this.watcher?.stop();
      for (const w of this.routeWaiters.splice(0)) w();
    };
    process.on("SIGTERM", stop);
    process.on("SIGINT", stop);
    const tasks = [this.heartbeat(), this.watchRoute()];
    const loops = [this.fetchLoop("old"), this.fetchLoop("new")];
    process.stdout.write("ready\n");
    for (const r of await Promise.allSettled(loops)) {
      if (r.status === "rejected") log("a fetch loop failed:", r.reason);
    }
    this.watcher?.stop();
    await Promise.allSettled(tasks);
    await this.writes;
    try {
      await this.kv.delete(this.key);
    } catch (e) {
      log("deregister:", e.message);
    }
    this.line({
      done: true,
      processed: this.processed,
      acked: this.acked,
      fenced_off: this.fencedOff,
      dropped_lapsed: this.dropped,
    });
    closeSync(this.fd);
    await this.nc.close();
  }
}

await new App().run();
