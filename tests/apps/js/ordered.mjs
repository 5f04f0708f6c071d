// An ordered consumer written with plain nats.js (@nats-io/jetstream), standing for a
// user's app, from the client's README: js.consumers.get(stream) (no name: the
// library creates and re-creates an ephemeral ordered consumer) and consume().
//
//   node ordered.mjs --server URL --stream S --out FILE [--deliver new|all]
//
// --deliver new (default): from the next message published; all: from the start.
// Lines: {"id", "stream", "seq", "subject", "t_ms"} per message;
// last {"done": true, "handled", "ended"} (ended: the iterator ended by itself).
import { connect } from "@nats-io/transport-node";
import { jetstream, DeliverPolicy } from "@nats-io/jetstream";
import { parseArgs, output, logger, stopSignal, sleep, ready } from "./common.mjs";

const a = parseArgs(["server", "stream", "out"], { deliver: "new" });
const log = logger("ordered.mjs");
const out = output(a.out);
const stop = stopSignal();
const nc = await connect({ servers: a.server, maxReconnectAttempts: -1, reconnectTimeWait: 200, name: "cutover-test-ordered-js" });
const js = jetstream(nc);
let c;
for (;;) {
  try {
    c = await js.consumers.get(a.stream, { deliver_policy: a.deliver === "all" ? DeliverPolicy.All : DeliverPolicy.New });
    break;
  } catch (e) {
    log.limited("get", `ordered consumer on ${a.stream} failed, retrying: ${e}`);
    await sleep(200);
  }
}
const msgs = await c.consume();
(async () => {
  for await (const s of msgs.status()) {
    if (!["heartbeat", "next", "debug", "flow_control"].includes(s.type)) log.limited(`status-${s.type}`, `status: ${JSON.stringify(s)}`);
  }
})().catch(() => {});
stop.promise.then(() => msgs.stop());
await nc.flush();
ready();
let handled = 0;
try {
  for await (const m of msgs) {
    handled++;
    out.line({ id: m.headers?.get("Nats-Msg-Id") || null, stream: m.info.stream, seq: m.seq, subject: m.subject, t_ms: Date.now() });
  }
} catch (e) {
  log(`consume ended with an error: ${e}`);
}
out.line({ done: true, handled, ended: !stop.stopped });
out.close();
await nc.close();
process.exit(0);
