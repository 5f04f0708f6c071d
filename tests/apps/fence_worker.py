#!/usr/bin/env python3
"""A pull-consumer app that follows docs/protocol.md, written with plain nats-py.

It was written from docs/protocol.md alone (not from our Rust library): it
registers in KV bucket CUTOVER (inst.<S>.<C>.<instance>, heartbeat every
second), watches route.<S>.<C>, and fetches from the old and the new consumer
concurrently: an old-consumer message above the fence (the route's now, or
the one in force when it was fetched) is nak'd with the record's delay and
never processed; the fence is acknowledged in the
registration as soon as the record is read. Acks are double acks (ack_sync).
Route entries apply in revision order (R8). The registration is the
instance's lease (R15): when a write of it is taken after the record may have
been ttl old (the process was stopped, or the bucket out of reach), every
message fetched before is dropped unanswered and the route read again.

Output (--out), JSON lines, one per message processed, written once its ack
attempt is over:
  {"id", "stream", "seq", "delivered", "instance", "acked": bool, "t_ms": when processed}
and on exit {"done": true, "processed", "acked", "fenced_off"}.
stdout: `ready` once registered and fetching. Logs go to stderr.
"""

import argparse
import asyncio
import json
import os
import signal
import sys
import time

import nats
import nats.errors
import nats.js.errors
from nats.js import api

BUCKET = "CUTOVER"


def log(*parts):
    print(time.strftime("%H:%M:%S"), "fence_worker:", *parts, file=sys.stderr, flush=True)


def now_ms():
    return int(time.time() * 1000)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server", required=True)
    p.add_argument("--stream", required=True, help="home binding: the stream")
    p.add_argument("--consumer", required=True, help="home binding: an existing pull durable")
    p.add_argument("--instance", required=True, help="unique id: letters, digits, _ and -")
    p.add_argument("--out", required=True)
    p.add_argument("--app-version", default="py-1")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--expires", type=float, default=0.3, help="seconds a fetch waits (old consumer: at most 1)")
    p.add_argument("--ttl", type=float, default=5.0, help="registration ttl, seconds")
    p.add_argument("--work-ms", type=float, default=0.0, help="time each message takes to process")
    p.add_argument(
        "--stop-at",
        type=int,
        default=0,
        help="fault injection: stop this process (SIGSTOP) in the middle of processing message N",
    )
    return p.parse_args(argv)


def targets(route, home, app_version):
    """(old, new) bindings to fetch from under the route record (protocol: States)."""
    if route is None:
        return home, None
    new = (route["stream"], route["consumer"])
    old = (route.get("old_stream") or home[0], route.get("old_consumer") or home[1])
    mode = route.get("mode", "drain")
    state = route.get("state", "moved")
    if mode == "rolling" and route.get("new_version") != app_version:
        return old, None  # another version: stay on the old consumer until replaced
    if route.get("version", 1) < 2 or mode == "drain" or state == "moved":
        return None, new
    old = old if state == "fenced" else None
    if route.get("ordered") and state == "fenced":
        new = None
    return old, new


def fence_of(route):
    """{"migration", "fence"} the old consumer's messages are held to, or None."""
    if route is None or route.get("mode") not in ("fence", "rolling") or route.get("fence") is None:
        return None
    return {"migration": route["migration"], "fence": route["fence"]}


class App:
    def __init__(self, args):
        self.args = args
        self.home = (args.stream, args.consumer)
        self.route = None
        self.route_changed = asyncio.Event()
        self.stop = asyncio.Event()
        self.record = {
            "version": 1,
            "instance": args.instance,
            "app_version": args.app_version,
            "lang": "python",
            "stream": args.stream,
            "consumer": args.consumer,
            "bound": [],
            "fence_ack": None,
            "ttl_ms": int(args.ttl * 1000),
            "heartbeat_ms": now_ms(),
        }
        self.key = f"inst.{args.stream}.{args.consumer}.{args.instance}"
        self.bound = {"old": None, "new": None}
        self.processed = self.acked = self.fenced_off = self.dropped = 0
        self.out = None
        # The lease (R15): when the last write the server took began, and how
        # often the record may have been ttl old before the next one landed.
        # On both clocks: the monotonic one may stand still while a VM is
        # paused, the wall clock does not.
        self.written = time.monotonic()
        self.written_wall = time.time()
        self.epoch = 0
        self.reread = False
        self.reread_lock = asyncio.Lock()
        # R8: the revision of the route entry applied last.
        self.route_rev = 0

    # ---- KV: bucket, registration, route -----------------------------------

    async def open_bucket(self):
        try:
            return await self.js.key_value(BUCKET)
        except nats.js.errors.BucketNotFoundError:
            return await self.js.create_key_value(api.KeyValueConfig(bucket=BUCKET, history=1))

    def lease_age(self):
        return max(time.monotonic() - self.written, time.time() - self.written_wall)

    async def write_record(self):
        start, start_wall = time.monotonic(), time.time()
        self.record["heartbeat_ms"] = now_ms()
        await self.kv.put(self.key, json.dumps(self.record).encode())
        if self.lease_age() >= self.args.ttl:
            # The runner may have counted this instance dead in between.
            self.epoch += 1
            self.reread = True
            log(f"registration lapsed (epoch {self.epoch}): dropping what was fetched before")
        if start > self.written:
            self.written, self.written_wall = start, start_wall

    async def lease(self):
        """The lease's epoch, confirmed: written first when half the ttl passed."""
        while self.lease_age() >= self.args.ttl / 2:
            try:
                await self.write_record()
            except Exception as e:  # noqa: BLE001 - act on nothing until it is taken
                log("registration:", repr(e))
                await asyncio.sleep(0.1)
        return self.epoch

    async def reread_route(self):
        """After a lapse: the route as the bucket has it now, before either
        fetch loop fetches again."""
        async with self.reread_lock:
            if not self.reread:
                return
            try:
                e = await self.kv.get(f"route.{self.home[0]}.{self.home[1]}")
                await self.apply_route(e.value, e.revision)
            except nats.js.errors.KeyNotFoundError as err:
                await self.apply_route(None, err.entry.revision if err.entry else 0)
            except Exception as e:  # noqa: BLE001 - read again on the next turn
                log("reading the route again:", repr(e))
                await asyncio.sleep(0.1)
                return
            self.reread = False

    async def heartbeat(self):
        while not self.stop.is_set():
            try:
                await self.write_record()
            except Exception as e:  # noqa: BLE001
                log("heartbeat:", repr(e))
            try:
                await asyncio.wait_for(self.stop.wait(), 1.0)
            except asyncio.TimeoutError:
                pass

    async def apply_route(self, value, revision):
        if revision and revision <= self.route_rev:
            return  # R8: older than what is in force
        self.route_rev = max(self.route_rev, revision or 0)
        try:
            route = None if value is None else json.loads(value)
        except ValueError as e:
            log("ignoring a route record that does not parse:", repr(e))
            return
        # The new route is in force before anything else runs: every message
        # handled from here on is checked against its fence.
        self.route = route
        self.route_changed.set()
        fence = fence_of(route)
        if fence is not None and self.record["fence_ack"] != fence:
            self.record["fence_ack"] = fence
            await self.write_record()
            log(f"acknowledged fence {fence}")

    async def watch_route(self):
        key = f"route.{self.home[0]}.{self.home[1]}"
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
                    value = None if e.operation in ("DEL", "PURGE") else e.value
                    await self.apply_route(value, e.revision)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001
                log("route watch failed, retrying:", repr(e))
                await asyncio.sleep(0.2)

    # ---- fetching ---------------------------------------------------------

    async def set_bound(self, role, binding):
        if self.bound[role] == binding:
            return
        self.bound[role] = binding
        self.record["bound"] = [f"{b[0]}/{b[1]}" for b in self.bound.values() if b]
        await self.write_record()

    async def fetch_loop(self, role):
        sub, sub_binding, under, epoch = None, None, None, 0
        expires = min(self.args.expires, 1.0) if role == "old" else self.args.expires
        while not self.stop.is_set():
            old, new = targets(self.route, self.home, self.args.app_version)
            want = old if role == "old" else new
            if sub is not None and sub_binding != want:
                await self.leave(sub, role, under, epoch)
                sub, sub_binding = None, None
            await self.set_bound(role, want)
            if want is None:
                self.route_changed.clear()
                try:
                    await asyncio.wait_for(self.route_changed.wait(), 0.05)
                except asyncio.TimeoutError:
                    pass
                continue
            if sub is None:
                try:
                    sub = await self.js.pull_subscribe_bind(consumer=want[1], stream=want[0])
                    sub_binding = want
                except Exception as e:  # noqa: BLE001
                    log(f"bind {want}: {e!r}")
                    await asyncio.sleep(0.05)
                    continue
            # The lease first (R15), then the route as the pull request goes
            # out: what it brings stays held to this fence, even if a rollback
            # deletes the route before it is handled (docs/protocol.md R14).
            epoch = await self.lease()
            if self.reread:
                await self.reread_route()
                continue
            under = self.route
            try:
                msgs = await sub.fetch(self.args.batch, timeout=expires)
            except nats.errors.TimeoutError:
                msgs = []
            except Exception as e:  # noqa: BLE001 - consumer gone, ...
                log(f"fetch {want}: {e!r}")
                await asyncio.sleep(0.05)
                continue
            for i, m in enumerate(msgs):
                if not await self.handle(m, role, under, epoch):
                    self.dropped += len(msgs) - i
                    break
        if sub is not None:
            await self.leave(sub, role, under, epoch)

    async def leave(self, sub, role, under, epoch):
        """Unsubscribes; handles what was already delivered to us (fence rule applies)."""
        try:
            await sub.unsubscribe()
        except Exception:  # noqa: BLE001
            pass
        q = sub._sub._pending_queue
        while not q.empty():
            m = q.get_nowait()
            if m.reply and not await self.handle(m, role, under, epoch):  # not a status message
                break

    # ---- one message ------------------------------------------------------

    async def handle(self, m, role, under, epoch):
        """False when the lease lapsed since the message was fetched: dropped."""
        meta = m.metadata
        # The fence now, and the one in force when it was fetched.
        for route in (self.route, under):
            fence = fence_of(route)
            if role == "old" and fence is not None and meta.sequence.stream > fence["fence"]:
                # Above the fence: the new durable delivers it. Never process it
                # here, never ack or term it: nak with the record's delay.
                if await self.lease() != epoch:
                    return False
                await m.nak(delay=max(route.get("nak_delay_ms", 30000), 1000) / 1000.0)
                self.fenced_off += 1
                return True
        if self.args.stop_at and self.processed + 1 == self.args.stop_at:
            log(f"stopping in the middle of message {self.args.stop_at} (SIGSTOP), messages in hand")
            self.args.stop_at = 0  # once
            os.kill(os.getpid(), signal.SIGSTOP)
        if self.args.work_ms > 0:
            await asyncio.sleep(self.args.work_ms / 1000.0)
        # The effect (here the ack and the record) only under the lease the
        # message was fetched under (R15).
        if await self.lease() != epoch:
            return False
        hdrs = m.headers or {}
        acked = False
        for _ in range(3):
            try:
                await m.ack_sync(timeout=1.0)
                acked = True
                break
            except Exception:  # noqa: BLE001 - ask again: a repeated +ACK is harmless
                continue
        self.processed += 1
        self.acked += acked
        rec = {
            "id": hdrs.get("Nats-Msg-Id"),
            "stream": meta.stream,
            "seq": meta.sequence.stream,
            "delivered": meta.num_delivered,
            "instance": self.args.instance,
            "acked": acked,
            "t_ms": time.time() * 1000.0,
        }
        self.out.write(json.dumps(rec) + "\n")
        return True

    # ---- main -------------------------------------------------------------

    async def run(self):
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop.set)
        self.out = open(self.args.out, "a", buffering=1, encoding="utf-8")
        self.nc = await nats.connect(self.args.server, max_reconnect_attempts=-1)
        self.js = self.nc.jetstream(timeout=2)
        self.kv = await self.open_bucket()
        try:
            e = await self.kv.get(f"route.{self.home[0]}.{self.home[1]}")
            await self.apply_route(e.value, e.revision)
        except nats.js.errors.KeyNotFoundError as err:
            self.route_rev = err.entry.revision if err.entry else 0
        await self.write_record()
        tasks = [asyncio.create_task(t) for t in (self.heartbeat(), self.watch_route())]
        loops = [asyncio.create_task(self.fetch_loop(r)) for r in ("old", "new")]
        print("ready", flush=True)
        await self.stop.wait()
        for r in await asyncio.gather(*loops, return_exceptions=True):
            if isinstance(r, BaseException):
                log("a fetch loop failed:", repr(r))
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        try:
            await self.kv.delete(self.key)
        except Exception as e:  # noqa: BLE001
            log("deregister:", repr(e))
        done = {
            "done": True,
            "processed": self.processed,
            "acked": self.acked,
            "fenced_off": self.fenced_off,
            "dropped_lapsed": self.dropped,
        }
        self.out.write(json.dumps(done) + "\n")
        self.out.close()
        await self.nc.close()
        return 0


def main(argv=None):
    args = parse_args(argv)
    if not args.instance or not all(c.isalnum() or c in "_-" for c in args.instance):
        print("--instance must be letters, digits, _ and - (one KV key token)", file=sys.stderr)
        return 2
    return asyncio.run(App(args).run())


if __name__ == "__main__":
    sys.exit(main())
