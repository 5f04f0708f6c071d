// A JetStream publisher written with plain nats.js (@nats-io/jetstream), standing
// for a user's app, from the client's README: js.publish(subj, data, {msgID}).
//
//   node publisher.mjs --server URL --subject SUBJ [--subjects-count K] --count N
//        --rate R --id-prefix P --out FILE [--ack-timeout 0.5] [--retry-horizon 120]
//        [--start-index 0] [--no-retry]
//
// Message i has payload String(i), msg-id P-i, subject SUBJ or SUBJ.{i % K}. A failed
// publish (no responders, timeout, a JetStream API error other than a permanent one)
// is sent again with the same msg-id, backoff 2 ms doubling to 50 ms, until acked or
// --retry-horizon s after its first attempt. --no-retry: one attempt, as nats.js's
// publish does by default; a failure is recorded and the next message follows.
// Lines: acked {"id","stream","seq","duplicate","attempts","stall_ms","subject","t_ms"},
// failed {"id","failed":true,"attempts","stall_ms","error","subject","t_ms"},
// last {"done":true,"acked","failed","max_stall_ms","stopped","abandoned","sent","elapsed_s"}.
import { connect } from "@nats-io/transport-node";
import { jetstream, JetStreamApiError } from "@nats-io/jetstream";
import { parseArgs, output, logger, stopSignal, sleep, ready } from "./common.mjs";

const PERMANENT = new Set([10054, 10060, 10070, 10071]);
const a = parseArgs(["server", "subject", "count", "rate", "id-prefix", "out"], {
  "subjects-count": "1", "ack-timeout": "0.5", "retry-horizon": "120", "start-index": "0",
}, ["no-retry"]);
const K = Number(a["subjects-count"]), N = Number(a.count), rate = Number(a.rate);
const ackTimeout = Number(a["ack-timeout"]) * 1000, horizon = Number(a["retry-horizon"]) * 1000;
const start = Number(a["start-index"]), noRetry = !!a["no-retry"];
const log = logger("publisher.mjs");
const out = output(a.out);
const stop = stopSignal();

const nc = await connect({ servers: a.server, maxReconnectAttempts: -1, reconnectTimeWait: 200, name: "cutover-test-publisher-js" });
const js = jetstream(nc, { timeout: ackTimeout });
ready();

const retryable = (e) => !(e instanceof JetStreamApiError && PERMANENT.has(e.code));
let acked = 0, failed = 0, abandoned = 0, sent = 0, maxStall = 0, lastErr = null;
const t0 = performance.now();
let nextAt = t0;
const interval = rate > 0 ? 1000 / rate : 0;
for (let i = start; i < start + N && !stop.stopped; i++) {
  if (interval) {
    const now = performance.now();
    nextAt = Math.max(nextAt, now - 1000);
    if (nextAt > now) await Promise.race([sleep(nextAt - now), stop.promise]);
    if (stop.stopped) break;
    nextAt += interval;
  }
  const subject = K > 1 ? `${a.subject}.${i % K}` : a.subject;
  const id = `${a["id-prefix"]}-${i}`;
  const first = performance.now();
  let attempts = 0, backoff = 2;
  sent++;
  for (;;) {
    attempts++;
    try {
      const pa = await js.publish(subject, String(i), { msgID: id, timeout: ackTimeout });
      const stall = performance.now() - first;
      if (lastErr) { log(`publish ${id} acked after ${attempts} attempts`); lastErr = null; }
      maxStall = Math.max(maxStall, stall);
      acked++;
      out.line({ id, stream: pa.stream, seq: pa.seq, duplicate: !!pa.duplicate, attempts, stall_ms: +stall.toFixed(3), subject, t_ms: Date.now() });
      break;
    } catch (e) {
      const kind = e?.constructor?.name;
      if (kind !== lastErr) { log(`publish ${id} attempt ${attempts} failed: ${e}`); lastErr = kind; }
      const elapsed = performance.now() - first;
      if (noRetry || !retryable(e) || elapsed >= horizon) {
        failed++;
        out.line({ id, failed: true, attempts, stall_ms: +elapsed.toFixed(3), error: String(e), subject, t_ms: Date.now() });
        break;
      }
      if (stop.stopped) { abandoned++; break; }
      await sleep(Math.min(backoff, Math.max(0, horizon - elapsed)));
      backoff = Math.min(backoff * 2, 50);
    }
  }
}
out.line({ done: true, acked, failed, max_stall_ms: +maxStall.toFixed(3), stopped: stop.stopped, abandoned, sent, elapsed_s: +((performance.now() - t0) / 1000).toFixed(3) });
out.close();
log(`done: acked=${acked} failed=${failed} abandoned=${abandoned} max_stall_ms=${maxStall.toFixed(1)}`);
await nc.close();
process.exit(0);
