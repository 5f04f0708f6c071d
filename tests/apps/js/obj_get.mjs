// An object store reader written with plain nats.js (@nats-io/obj), standing for a
// user's app, from the client's README: new Objm(nc).open(bucket), then
// os.getBlob(name) (get() and its ReadableStream, read whole) in a loop.
//
//   node obj_get.mjs --server URL --bucket B --out FILE [--objects 3] [--size BYTES]
//
// Reads o0 .. o{objects-1} round and round until SIGTERM and compares each with
// the content kv_app.py obj-put wrote (a 4096-byte block, byte i = (k*31+i) % 251,
// repeated to --size bytes; default 8 MiB). Prints `ready` once the store is open.
// Last line: {"done": true, "reads", "intact", "wrong", "not_found", "errors",
// "longest_bad_ms"} (the longest stretch of reads not intact).
import { connect } from "@nats-io/transport-node";
import { Objm } from "@nats-io/obj";
import { parseArgs, output, logger, stopSignal, sleep, ready } from "./common.mjs";

const a = parseArgs(["server", "bucket", "out"], { objects: "3", size: String(8 << 20) });
const log = logger("obj_get.mjs");
const out = output(a.out);
const stop = stopSignal();
const objects = Number(a.objects), size = Number(a.size);
function content(k) {
  const b = new Uint8Array(size);
  for (let i = 0; i < size; i++) b[i] = (k * 31 + (i % 4096)) % 251;
  return b;
}
const want = Array.from({ length: objects }, (_, k) => content(k));
const nc = await connect({ servers: a.server, maxReconnectAttempts: -1, reconnectTimeWait: 200, name: "cutover-test-obj-get-js" });
const os = await new Objm(nc).open(a.bucket);
ready();
const c = { reads: 0, intact: 0, wrong: 0, not_found: 0, errors: 0 };
let badSince = null, longest = 0;
for (let j = 0; !stop.stopped; j++) {
  const k = j % objects;
  let ok = false;
  try {
    const data = await os.getBlob(`o${k}`);
    if (data === null) c.not_found++;
    else if (data.length === size && Buffer.from(data).equals(Buffer.from(want[k]))) { c.intact++; ok = true; }
    else { c.wrong++; log.limited("wrong", `o${k}: ${data.length} bytes, not what was put`); }
  } catch (e) {
    c.errors++;
    log.limited("get", `get o${k} failed: ${e}`);
  }
  c.reads++;
  const now = performance.now();
  if (ok) {
    if (badSince !== null) longest = Math.max(longest, now - badSince);
    badSince = null;
  } else if (badSince === null) badSince = now;
  await sleep(1);
}
out.line({ done: true, ...c, longest_bad_ms: +longest.toFixed(1) });
out.close();
await nc.close();
process.exit(0);
