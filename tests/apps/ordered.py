#!/usr/bin/env python3
"""An ordered consumer written with plain nats-py, standing for a user's app:
js.subscribe(subject, stream=S, ordered_consumer=True, deliver_policy=new|all)
(the client creates and re-creates its ephemeral push consumer itself).

    ordered.py --server URL --stream S --subject SUBJ --out FILE [--deliver new|all]

Prints `ready` once subscribed. Lines: {"id", "stream", "seq", "subject", "t_ms"}
per message; on SIGTERM/SIGINT a last {"done": true, "handled", "ended": false}.
"""

import argparse
import asyncio
import json
import signal
import time

import nats
from nats.js import api


async def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server", required=True)
    p.add_argument("--stream", required=True)
    p.add_argument("--subject", required=True, help="filter subject, e.g. orders.>")
    p.add_argument("--out", required=True)
    p.add_argument("--deliver", choices=("new", "all"), default="new")
    a = p.parse_args()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for s in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(s, stop.set)
    out = open(a.out, "a", buffering=1, encoding="utf-8")
    nc = await nats.connect(a.server, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    js = nc.jetstream()
    pol = api.DeliverPolicy.NEW if a.deliver == "new" else api.DeliverPolicy.ALL
    sub = await js.subscribe(a.subject, stream=a.stream, ordered_consumer=True, deliver_policy=pol)
    await nc.flush()
    print("ready", flush=True)
    handled = 0
    while not stop.is_set():
        try:
            m = await sub.next_msg(timeout=0.2)
        except (nats.errors.TimeoutError, asyncio.TimeoutError):
            continue
        handled += 1
        md = m.metadata
        out.write(json.dumps({"id": (m.headers or {}).get("Nats-Msg-Id"), "stream": md.stream,
                              "seq": md.sequence.stream, "subject": m.subject,
                              "t_ms": int(time.time() * 1000)}) + "\n")
    out.write(json.dumps({"done": True, "handled": handled, "ended": False}) + "\n")
    out.close()
    await nc.close()


if __name__ == "__main__":
    asyncio.run(main())
