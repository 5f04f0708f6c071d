// A KV reader written with plain nats.js (@nats-io/kv), standing for a user's app,
// from the client's README: new Kvm(nc).open(bucket), then kv.get(key) in a loop
// (nats.js reads with a direct get when the bucket's stream allows it).
//
//   node kv_get.mjs --server URL --bucket B --out FILE [--keys 100] [--first 0]
//
// Reads p.{n}, n = first + j % (keys - first), j = 0, 1, ... (1 ms apart), expecting
// the value "p{n}" written before it started, until SIGTERM. Prints `ready` once the
// bucket is open. A read that fails is an error (logged, rate-limited), one that
// finds nothing "not found". Last line: {"done": true, "reads", "right", "wrong",
// "not_found", "errors", "longest_wrong_ms"} (the longest stretch of reads not right).
import { connect } from "@nats-io/transport-node";
import { Kvm } from "@nats-io/kv";
import { parseArgs, output, logger, stopSignal, sleep, ready } from "./common.mjs";

const a = parseArgs(["server", "bucket", "out"], { keys: "100", first: "0" });
const log = logger("kv_get.mjs");
const out = output(a.out);
const stop = stopSignal();
const keys = Number(a.keys), firstKey = Number(a.first);
const nc = await connect({ servers: a.server, maxReconnectAttempts: -1, reconnectTimeWait: 200, name: "cutover-test-kv-get-js" });
const kv = await new Kvm(nc).open(a.bucket);
ready();
const c = { reads: 0, right: 0, wrong: 0, not_found: 0, errors: 0 };
let wrongSince = null, longest = 0;
for (let j = 0; !stop.stopped; j++) {
  const n = firstKey + (j % (keys - firstKey));
  let ok = false;
  try {
    const e = await kv.get(`p.${n}`);
    if (e === null || e.operation !== "PUT") c.not_found++;
    else if (e.string() === `p${n}`) { c.right++; ok = true; }
    else c.wrong++;
  } catch (err) {
    c.errors++;
    log.limited("get", `get p.${n} failed: ${err}`);
  }
  c.reads++;
  const now = performance.now();
  if (ok) {
    if (wrongSince !== null) longest = Math.max(longest, now - wrongSince);
    wrongSince = null;
  } else if (wrongSince === null) wrongSince = now;
  await sleep(1);
}
out.line({ done: true, ...c, longest_wrong_ms: +longest.toFixed(1) });
out.close();
await nc.close();
process.exit(0);
