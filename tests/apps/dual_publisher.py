#!/usr/bin/env python3
"""A publisher following docs/protocol.md, *Dual-write*, in plain nats-py.

Written from the protocol page alone (not with cutover-app). It registers at
`pubi.<STREAM>.<INSTANCE>` in KV bucket CUTOVER (heartbeat 1 s, ttl 5 s),
watches the publisher record `pub.<STREAM>` and publishes --count messages at
about --rate msg/s: without a record to the stream's subject, with `writes`
`dual` to it and to its B subject (the record's subject pairs), with `b` to
the B subject only. Message i has payload str(i), `Nats-Msg-Id: {prefix}-{i}`
and subject `{subject}.{i % K}`. Each side is retried with the same msg-id
(backoff 2 ms doubling to 50 ms) until acknowledged or --retry-horizon s. A
record change waits for the publish in flight (a lock held per publish),
then is acknowledged in the registration at once.

With --from-server (A in another account, domain or system: "Across accounts
or systems" in docs/protocol.md), A's subjects are published on that
connection and B's on --server, which also holds the record and the
registration (the target side).

Output (--out), JSON lines, line-buffered:
  {"id", "writes", "streams": [..], "attempts", "stall_ms"}   acknowledged
  {"id", "failed": true, "error"}                              given up
  {"done": true, "acked", "failed", "writes"}                  last line
SIGTERM/SIGINT stop after the publish in flight.
"""

import argparse
import asyncio
import json
import signal
import sys
import time

import nats
import nats.errors
import nats.js.errors
from nats.js import api

BUCKET = "CUTOVER"


def log(*parts):
    print(time.strftime("%H:%M:%S"), "dual_publisher:", *parts, file=sys.stderr, flush=True)


def now_ms():
    return int(time.time() * 1000)


def map_subject(pairs, subject):
    """The B subject of `subject`: the first pair whose A pattern matches it,
    each wildcard token carried to the B pattern's wildcard of the same rank."""
    toks = subject.split(".")
    for a_pat, b_pat in pairs:
        a = a_pat.split(".")
        captures, ok = [], True
        for i, t in enumerate(a):
            if t == ">":
                if i >= len(toks):
                    ok = False
                else:
                    captures.append(".".join(toks[i:]))
                break
            if i >= len(toks):
                ok = False
                break
            if t == "*":
                captures.append(toks[i])
            elif t != toks[i]:
                ok = False
                break
        else:
            ok = ok and len(a) == len(toks)
        if not ok:
            continue
        out, k = [], 0
        for t in b_pat.split("."):
            if t in ("*", ">"):
                out.append(captures[k])
                k += 1
            else:
                out.append(t)
        return ".".join(out)
    return None


class Publisher:
    def __init__(self, args):
        self.args = args
        self.stop = asyncio.Event()
        self.lock = asyncio.Lock()  # held by each publish; a record change waits for it
        self.record = None
        self.key = f"pubi.{args.stream}.{args.instance}"
        self.reg = {
            "version": 1,
            "instance": args.instance,
            "app_version": "py-1",
            "lang": "python",
            "stream": args.stream,
            "ack": None,
            "ttl_ms": 5000,
            "heartbeat_ms": now_ms(),
        }

    async def write_reg(self):
        self.reg["heartbeat_ms"] = now_ms()
        await self.kv.put(self.key, json.dumps(self.reg).encode())

    async def heartbeat(self):
        while not self.stop.is_set():
            try:
                await self.write_reg()
            except Exception as e:  # noqa: BLE001
                log("heartbeat:", repr(e))
            try:
                await asyncio.wait_for(self.stop.wait(), 1.0)
            except asyncio.TimeoutError:
                pass

    async def apply(self, value):
        try:
            rec = None if value is None else json.loads(value)
        except ValueError as e:
            log("ignoring a publisher record that does not parse:", repr(e))
            return
        async with self.lock:  # every publish started before has finished
            self.record = rec
            ack = None if rec is None else {"migration": rec["migration"], "writes": rec["writes"]}
            if ack != self.reg["ack"]:
                self.reg["ack"] = ack
                await self.write_reg()
                log("acknowledged", ack)

    async def watch(self):
        key = f"pub.{self.args.stream}"
        while not self.stop.is_set():
            try:
                watcher = await self.kv.watch(key)
                while not self.stop.is_set():
                    try:
                        e = await watcher.updates(timeout=1.0)
                    except nats.errors.TimeoutError:
                        continue
                    if e is None:
                        continue
                    await self.apply(None if e.operation in ("DEL", "PURGE") else e.value)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001
                log("record watch failed, retrying:", repr(e))
                await asyncio.sleep(0.2)

    async def one(self, js, subject, msg_id, payload):
        """Publishes to one subject until acknowledged; returns (stream, attempts)."""
        first, attempts, backoff = time.monotonic(), 0, 0.002
        while True:
            attempts += 1
            try:
                ack = await js.publish(subject, payload, timeout=0.5, headers={"Nats-Msg-Id": msg_id})
                return ack.stream, attempts
            except Exception as e:  # noqa: BLE001 - retried with the same id
                if time.monotonic() - first >= self.args.retry_horizon:
                    raise
                log(f"publish {msg_id} to {subject} attempt {attempts}: {e!r}")
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 0.05)

    async def publish(self, i):
        subject = f"{self.args.subject}.{i % self.args.subjects_count}"
        msg_id = f"{self.args.id_prefix}-{i}"
        payload = str(i).encode()
        async with self.lock:
            rec = self.record
            writes = "a" if rec is None else rec["writes"]
            targets = [(self.a_js, subject)]
            if writes in ("dual", "b"):
                b = map_subject(rec["subjects"], subject)
                if b is None:
                    raise RuntimeError(f"no pair of the publisher record maps {subject}")
                targets = [(self.a_js, subject), (self.js, b)] if writes == "dual" else [(self.js, b)]
            t0 = time.monotonic()
            res = await asyncio.gather(*(self.one(js, s, msg_id, payload) for js, s in targets))
            return {
                "id": msg_id,
                "writes": writes,
                "streams": [r[0] for r in res],
                "attempts": max(r[1] for r in res),
                "stall_ms": round((time.monotonic() - t0) * 1000.0, 3),
            }

    async def run(self):
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop.set)
        out = open(self.args.out, "a", buffering=1, encoding="utf-8")
        self.nc = await nats.connect(self.args.server, max_reconnect_attempts=-1)
        self.js = self.nc.jetstream(timeout=2)
        self.a_nc, self.a_js = None, self.js
        if self.args.from_server:
            self.a_nc = await nats.connect(self.args.from_server, max_reconnect_attempts=-1)
            self.a_js = self.a_nc.jetstream(timeout=2)
        try:
            self.kv = await self.js.key_value(BUCKET)
        except nats.js.errors.BucketNotFoundError:
            self.kv = await self.js.create_key_value(api.KeyValueConfig(bucket=BUCKET, history=1))
        try:
            e = await self.kv.get(f"pub.{self.args.stream}")
            await self.apply(e.value)
        except nats.js.errors.KeyNotFoundError:
            pass
        await self.write_reg()
        tasks = [asyncio.create_task(t) for t in (self.heartbeat(), self.watch())]
        print("ready", flush=True)
        acked = failed = 0
        interval = 1.0 / self.args.rate
        next_at = time.monotonic()
        for i in range(self.args.count):
            if self.stop.is_set():
                break
            next_at = max(next_at + interval, time.monotonic() - 1.0)
            delay = next_at - time.monotonic()
            if delay > 0:
                try:
                    await asyncio.wait_for(self.stop.wait(), delay)
                    break
                except asyncio.TimeoutError:
                    pass
            try:
                rec = await self.publish(i)
                acked += 1
            except Exception as e:  # noqa: BLE001
                failed += 1
                rec = {"id": f"{self.args.id_prefix}-{i}", "failed": True, "error": repr(e)}
            out.write(json.dumps(rec) + "\n")
        if self.args.stay:
            await self.stop.wait()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        writes = "a" if self.record is None else self.record["writes"]
        try:
            await self.kv.delete(self.key)
        except Exception as e:  # noqa: BLE001
            log("deregister:", repr(e))
        out.write(json.dumps({"done": True, "acked": acked, "failed": failed, "writes": writes}) + "\n")
        out.close()
        await self.nc.close()
        if self.a_nc is not None:
            await self.a_nc.close()
        return 0


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server", required=True, help="the target side: B, the record, the registration")
    p.add_argument("--from-server", help="the source side (A's subjects), when A is in another account or system")
    p.add_argument("--stream", required=True, help="the stream it publishes to without a record (FROM)")
    p.add_argument("--instance", required=True, help="its id: letters, digits, _ and -")
    p.add_argument("--subject", required=True, help="message i goes to SUBJECT.{i %% K}")
    p.add_argument("--subjects-count", type=int, default=4)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--rate", type=float, required=True)
    p.add_argument("--id-prefix", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--retry-horizon", type=float, default=60.0)
    p.add_argument("--stay", action="store_true", help="after --count, stay registered until stopped")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if not all(c.isalnum() or c in "_-" for c in args.instance) or args.rate <= 0:
        print("--instance must be letters, digits, _ and -; --rate > 0", file=sys.stderr)
        return 2
    return asyncio.run(Publisher(args).run())


if __name__ == "__main__":
    sys.exit(main())
