// A KV watcher written with plain nats.js (@nats-io/kv), standing for a
// user's app, from the client's own documentation: Kvm(nc).open(bucket),
// then kv.watch() and `for await` over its entries.
//
//   node kv_watcher.mjs --server URL --bucket B --out FILE [--key K] [--updates]
//
// Prints `ready` on stdout once the watch is set up. One JSON line per entry:
// {"key", "rev", "op", "value", "t"} (t: epoch seconds); a last line
// {"done": true, "entries", "ended"} on SIGTERM, or when the watch's iterator
// ends by itself ("ended": true: the client gave up).
import { connect } from "@nats-io/transport-node";
import { Kvm } from "@nats-io/kv";
import { openSync, writeSync } from "node:fs";

const args = {};
for (let i = 2; i < process.argv.length; i++) {
  const a = process.argv[i].replace(/^--/, "");
  if (a === "updates") args.updates = true;
  else args[a] = process.argv[++i];
}
for (const k of ["server", "bucket", "out"]) {
  if (!args[k]) {
    console.error(`--${k} is required`);
    process.exit(2);
  }
}
const fd = openSync(args.out, "a");
const line = (o) => writeSync(fd, JSON.stringify(o) + "\n");
let entries = 0;

const nc = await connect({ servers: args.server });
const kv = await new Kvm(nc).open(args.bucket);
const opts = {};
if (args.key) opts.key = args.key;
if (args.updates) opts.include = "updates";
const w = await kv.watch(opts);
let stopping = false;
const stop = async () => {
  if (stopping) return;
  stopping = true;
  w.stop();
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
process.stdout.write("ready\n");
for await (const e of w) {
  entries++;
  line({ key: e.key, rev: e.revision, op: e.operation, value: e.string(), t: Date.now() / 1000 });
}
line({ done: true, entries, ended: !stopping });
await nc.close();
