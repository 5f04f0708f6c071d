#!/usr/bin/env python3
"""A JetStream consumer app written with plain nats-py, standing for a user's app.

It binds to an EXISTING durable consumer (it never creates one) and handles each
message: it double-acks it (ack_sync: +ACK with a reply, waiting for the server's
answer) and writes one JSON line about it. Pull mode fetches batches in a loop;
push mode subscribes to the consumer's deliver subject (in its deliver group).

With --follow-route it also watches the key `route.{stream}.{consumer}` of the
KV bucket CUTOVER (waiting for the bucket to appear) and, when the key appears
or changes, finishes the batch in hand, leaves the current consumer and binds
to the (stream, consumer) named in the record's JSON value. A delete/purge of
the key sends it back to --stream/--consumer.

Output (--out), JSON lines, line-buffered, one per message handled, written
once the ack attempt is over:
  {"id", "stream", "seq", "source", "delivered", "consumer", "subject",
   "t_ms", "acked": bool, "ack_error": str|null}
and on exit {"done": true, "handled", "acked", "ack_failed", "route"}.
stdout: `ready` once bound the first time; `route STREAM CONSUMER` after each
switch done for --follow-route. Logs go to stderr.
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

ROUTE_BUCKET = "CUTOVER"


def log(*parts):
    print(time.strftime("%H:%M:%S"), "worker:", *parts, file=sys.stderr, flush=True)


class RateLimitedLog:
    """Logs a repeated error once, then at most every `every` seconds."""

    def __init__(self, every=5.0):
        self.every = every
        self.last = {}

    def __call__(self, key, *parts):
        now = time.monotonic()
        if now - self.last.get(key, -1e9) >= self.every:
            self.last[key] = now
            log(*parts)

    def clear(self, key):
        self.last.pop(key, None)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server", required=True, help="NATS URL, e.g. nats://127.0.0.1:4222")
    p.add_argument("--stream", required=True)
    p.add_argument("--consumer", required=True, help="name of an existing durable consumer")
    p.add_argument("--mode", choices=("pull", "push"), required=True)
    p.add_argument("--out", required=True, help="JSON lines output file (appended to)")
    p.add_argument("--batch", type=int, default=32, help="pull: messages per fetch")
    p.add_argument("--expires", type=float, default=0.3, help="pull: seconds one fetch waits")
    p.add_argument("--deliver-subject", help="push: subscribe here instead of the consumer's deliver subject")
    p.add_argument("--group", help="push: queue group (default: the consumer's deliver group)")
    p.add_argument("--follow-route", action="store_true", help=f"follow route.S.C in KV bucket {ROUTE_BUCKET}")
    p.add_argument("--ack-timeout", type=float, default=1.0, help="seconds to wait for the server's ack reply")
    p.add_argument("--id-from-payload", action="store_true", help="a message without Nats-Msg-Id is known by its payload (publisher.py --no-msg-id)")
    p.add_argument("--create", action="store_true", help="pull: create the durable (explicit ack, deliver all) at start if it does not exist, as an application that owns its consumer")
    p.add_argument("--guard", metavar="BUCKET", help="claim each Nats-Msg-Id in this KV bucket first (docs/protocol.md, idempotency guard)")
    return p.parse_args(argv)


def is_status(msg):
    return bool(msg.headers) and "Status" in msg.headers and not msg.reply


class Binding:
    """One subscription to one (stream, consumer)."""

    def __init__(self, js, args, stream, consumer):
        self.js = js
        self.args = args
        self.stream = stream
        self.consumer = consumer
        self.sub = None

    async def open(self):
        # Raises NotFoundError when the durable does not exist (created only by --create, at start).
        info = await self.js.consumer_info(self.stream, self.consumer)
        cfg = info.config
        if self.args.mode == "pull":
            if cfg.deliver_subject:
                raise RuntimeError(f"consumer {self.stream}/{self.consumer} is a push consumer; --mode pull given")
            self.sub = await self.js.pull_subscribe_bind(consumer=self.consumer, stream=self.stream)
        else:
            deliver = self.args.deliver_subject or cfg.deliver_subject
            if not deliver:
                raise RuntimeError(f"consumer {self.stream}/{self.consumer} is a pull consumer; --mode push given")
            group = self.args.group or cfg.deliver_group
            if self.args.group and cfg.deliver_group and self.args.group != cfg.deliver_group:
                log(f"warning: --group {self.args.group} differs from the deliver group {cfg.deliver_group}")
            cfg.deliver_subject = deliver
            cfg.deliver_group = group
            # No callback: messages queue up and are taken with next_msg; acks are manual.
            self.sub = await self.js.subscribe_bind(
                stream=self.stream, config=cfg, consumer=self.consumer, manual_ack=True
            )

    async def next_batch(self):
        """Messages to handle; [] on timeout. Other errors are raised."""
        if self.args.mode == "pull":
            try:
                return await self.sub.fetch(self.args.batch, timeout=self.args.expires)
            except nats.errors.TimeoutError:  # includes FetchTimeoutError: nothing to deliver
                return []
        try:
            first = await self.sub.next_msg(timeout=self.args.expires)
        except nats.errors.TimeoutError:
            return []
        msgs = [first]
        while len(msgs) < self.args.batch and self.sub.pending_msgs > 0:
            try:
                msgs.append(await self.sub.next_msg(timeout=0.001))
            except nats.errors.TimeoutError:
                break
        return msgs

    async def close(self):
        """Unsubscribes and returns the messages already delivered to us but not handled."""
        if self.sub is None:
            return []
        try:
            await self.sub.unsubscribe()
        except Exception as e:  # noqa: BLE001
            log("unsubscribe:", repr(e))
        # Messages that reached the client after a fetch gave up (pull) or that the
        # server pushed (push) sit in the subscription's queue; handle them rather
        # than leave them to be redelivered after ack_wait.
        inner = self.sub._sub  # both PullSubscription and PushSubscription wrap a Subscription
        q = inner._pending_queue
        left = []
        while not q.empty():
            m = q.get_nowait()
            if not is_status(m):
                left.append(m)
        self.sub = None
        return left


class Worker:
    def __init__(self, args):
        self.args = args
        self.stop = asyncio.Event()
        self.home = (args.stream, args.consumer)
        self.target = self.home  # where --follow-route says to fetch
        self.route_record = None
        self.reconnected = asyncio.Event()  # set by the client on reconnect: renew the route watch
        self.handled = self.acked = self.ack_failed = 0
        self.rlog = RateLimitedLog()
        self.out = None
        self.nc = None
        self.js = None

    async def connect(self):
        async def error_cb(e):
            self.rlog(type(e).__name__, "connection error:", repr(e))

        async def disconnected_cb():
            if not self.stop.is_set():
                log("disconnected")

        async def reconnected_cb():
            log("reconnected")
            self.reconnected.set()

        deadline = time.monotonic() + 30
        while True:
            try:
                self.nc = await nats.connect(
                    self.args.server,
                    name=f"cutover-test-worker-{self.args.mode}",
                    error_cb=error_cb,
                    disconnected_cb=disconnected_cb,
                    reconnected_cb=reconnected_cb,
                    max_reconnect_attempts=-1,
                    reconnect_time_wait=0.2,
                    connect_timeout=2,
                )
                self.js = self.nc.jetstream(timeout=2)
                return
            except Exception as e:  # noqa: BLE001
                if time.monotonic() > deadline:
                    raise
                log("connect failed, retrying:", repr(e))
                await asyncio.sleep(0.2)

    # ---- route following -------------------------------------------------

    def route_key(self):
        return f"route.{self.home[0]}.{self.home[1]}"

    def apply_route(self, value, revision):
        if value is None:
            new = self.home
            rec = None
        else:
            try:
                rec = json.loads(value)
                new = (rec["stream"], rec["consumer"])
            except (ValueError, KeyError, TypeError) as e:
                log(f"ignoring bad route record (rev {revision}): {value!r}: {e!r}")
                return
        self.route_record = rec
        if new != self.target:
            log(f"route rev {revision}: {self.target[0]}/{self.target[1]} -> {new[0]}/{new[1]} record={rec}")
            self.target = new

    async def read_route_once(self):
        """The route in force at start, if the bucket and key exist already."""
        try:
            kv = await self.js.key_value(ROUTE_BUCKET)
            entry = await kv.get(self.route_key())
            self.apply_route(entry.value, entry.revision)
        except (nats.js.errors.NotFoundError, nats.errors.TimeoutError):
            pass  # no bucket or no key yet (KeyNotFoundError/KeyDeletedError are NotFoundError)
        except Exception as e:  # noqa: BLE001
            log("reading route:", repr(e))

    async def watch_route(self):
        key = self.route_key()
        while not self.stop.is_set():
            watcher = None
            try:
                kv = await self.js.key_value(ROUTE_BUCKET)
                watcher = await kv.watch(key)
                log(f"watching {ROUTE_BUCKET}/{key}")
                self.rlog.clear("watch")
                self.reconnected.clear()
                while not self.stop.is_set():
                    if self.reconnected.is_set():
                        # The watch's ordered consumer may be gone with the old
                        # connection (e.g. a server restart): set it up again; it
                        # re-delivers the key's current value, so nothing is missed.
                        log("reconnected: renewing the route watch")
                        break
                    try:
                        entry = await watcher.updates(timeout=1.0)
                    except nats.errors.TimeoutError:
                        continue
                    if entry is None:  # marker: initial values delivered
                        continue
                    if entry.operation in ("DEL", "PURGE"):
                        self.apply_route(None, entry.revision)
                    else:
                        self.apply_route(entry.value, entry.revision)
            except asyncio.CancelledError:
                raise
            except nats.js.errors.BucketNotFoundError:
                self.rlog("watch", f"KV bucket {ROUTE_BUCKET} not there yet; waiting")
                await asyncio.sleep(0.1)
            except Exception as e:  # noqa: BLE001
                self.rlog("watch", "route watch failed, retrying:", repr(e))
                await asyncio.sleep(0.2)
            finally:
                if watcher is not None:
                    try:
                        await watcher.stop()
                    except Exception:  # noqa: BLE001
                        pass

    # ---- message handling ------------------------------------------------

    async def claim(self, msg_id):
        """The idempotency guard of docs/protocol.md: "first", "done" or "busy"."""
        plain = msg_id and all(c.isalnum() or c in "-_=./" for c in msg_id) and ".." not in msg_id
        plain = plain and not msg_id.startswith(".") and not msg_id.endswith(".")
        key = f"id.{msg_id}" if plain else "hex." + msg_id.encode().hex()
        try:
            await self.guard.create(key, b"busy")
            return "first", key
        except nats.js.errors.KeyWrongLastSequenceError:
            try:
                e = await self.guard.get(key)
            except nats.js.errors.KeyNotFoundError:
                return "busy", key  # released meanwhile: a redelivery claims it
            return ("done" if e.value == b"done" else "busy"), key

    async def handle(self, msg):
        if is_status(msg):
            return
        hdrs = msg.headers or {}
        if self.guard is not None:
            verdict, key = await self.claim(hdrs.get("Nats-Msg-Id", ""))
            if verdict == "busy":
                await msg.nak(delay=0.1)
                return
            if verdict == "done":
                try:
                    await msg.ack_sync(timeout=self.args.ack_timeout)
                except Exception as e:  # noqa: BLE001 - redelivered and skipped again
                    self.rlog("ack", "ack of a guarded duplicate failed:", repr(e))
                return
            await self.guard.put(key, b"done")
        try:
            meta = msg.metadata
        except Exception as e:  # noqa: BLE001 - not a JetStream message
            log("skipping a message without JetStream metadata:", msg.subject, repr(e))
            return
        rec = {
            "id": hdrs.get("Nats-Msg-Id") or (msg.data.decode(errors="replace").strip() if self.args.id_from_payload else None),
            "stream": meta.stream,
            "seq": meta.sequence.stream,
            "source": hdrs.get("Nats-Stream-Source"),
            "delivered": meta.num_delivered,
            "consumer": meta.consumer,
            "subject": msg.subject,
            "t_ms": time.time() * 1000.0,  # when it was handled (for consumer-gap measurements)
        }
        ack_error = None
        first, backoff = time.monotonic(), 0.02
        while True:
            try:
                await msg.ack_sync(timeout=self.args.ack_timeout)
                ack_error = None
                break
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError) as e:
                # The server may be busy, or the consumer's leader being
                # elected (no responders until it is): ask again for a while
                # (a repeated +ACK is harmless); a lost ack is a redelivery.
                ack_error = repr(e)
                if time.monotonic() - first >= 5.0:
                    break
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 0.5)
            except Exception as e:  # noqa: BLE001
                ack_error = repr(e)
                break
        self.handled += 1
        if ack_error is None:
            self.acked += 1
        else:
            self.ack_failed += 1
            self.rlog("ack", f"ack of {rec['stream']}#{rec['seq']} ({rec['id']}) failed: {ack_error}")
        rec["acked"] = ack_error is None
        rec["ack_error"] = ack_error
        self.out.write(json.dumps(rec) + "\n")

    async def create_durable(self):
        """--create: the durable, created once at start if it does not exist
        (an application that owns its consumer; never again afterwards)."""
        if self.args.mode != "pull":
            raise RuntimeError("--create is for pull consumers")
        try:
            await self.js.consumer_info(self.args.stream, self.args.consumer)
            return
        except nats.js.errors.NotFoundError:
            pass
        cfg = api.ConsumerConfig(
            durable_name=self.args.consumer,
            ack_policy=api.AckPolicy.EXPLICIT,
            deliver_policy=api.DeliverPolicy.ALL,
        )
        await self.js.add_consumer(self.args.stream, cfg)
        log(f"created durable {self.args.stream}/{self.args.consumer}")

    async def bind(self, stream, consumer):
        """Binds to (stream, consumer), retrying until it exists, the route moves, or stop."""
        while not self.stop.is_set():
            b = Binding(self.js, self.args, stream, consumer)
            try:
                await b.open()
                self.rlog.clear("bind")
                log(f"bound to {stream}/{consumer} ({self.args.mode})")
                return b
            except nats.js.errors.NotFoundError:
                self.rlog("bind", f"consumer {stream}/{consumer} not found; retrying")
            except Exception as e:  # noqa: BLE001
                self.rlog("bind", f"binding {stream}/{consumer} failed, retrying:", repr(e))
            if (stream, consumer) != self.target:
                return None  # route moved on meanwhile
            try:
                await asyncio.wait_for(self.stop.wait(), 0.2)
            except asyncio.TimeoutError:
                pass
        return None

    async def run(self):
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop.set)
        self.out = open(self.args.out, "a", buffering=1, encoding="utf-8")
        await self.connect()
        self.guard = None
        if self.args.guard:
            try:
                self.guard = await self.js.key_value(self.args.guard)
            except nats.js.errors.BucketNotFoundError:
                cfg = api.KeyValueConfig(bucket=self.args.guard, history=1, ttl=600)
                self.guard = await self.js.create_key_value(cfg)
        if self.args.create:
            await self.create_durable()
        watch_task = None
        if self.args.follow_route:
            await self.read_route_once()
            watch_task = asyncio.create_task(self.watch_route())

        binding = None
        announced_ready = False
        errors_in_row = 0
        try:
            while not self.stop.is_set():
                if binding is None or (binding.stream, binding.consumer) != self.target:
                    if binding is not None:
                        # Switch: the batch in hand is done; handle what is still queued, then leave.
                        for m in await binding.close():
                            await self.handle(m)
                        binding = None
                    stream, consumer = self.target
                    binding = await self.bind(stream, consumer)
                    if binding is None:
                        continue
                    if not announced_ready:
                        await self.nc.flush()  # the SUB has reached the server
                        print("ready", flush=True)
                        announced_ready = True
                    elif self.args.follow_route:
                        print(f"route {stream} {consumer}", flush=True)
                try:
                    msgs = await binding.next_batch()
                    if errors_in_row:
                        log(f"{binding.stream}/{binding.consumer} delivering again")
                    errors_in_row = 0
                except Exception as e:  # noqa: BLE001 - consumer gone, no responders, ...
                    errors_in_row += 1
                    self.rlog(
                        "fetch", f"fetch from {binding.stream}/{binding.consumer} failed ({errors_in_row}x):", repr(e)
                    )
                    await asyncio.sleep(min(0.05 * errors_in_row, 0.5))
                    continue
                for m in msgs:
                    await self.handle(m)
        finally:
            if watch_task is not None:
                watch_task.cancel()
                try:
                    await watch_task
                except BaseException:  # noqa: BLE001
                    pass
            if binding is not None:
                for m in await binding.close():
                    await self.handle(m)
            done = {
                "done": True,
                "handled": self.handled,
                "acked": self.acked,
                "ack_failed": self.ack_failed,
                "route": list(self.target),
            }
            self.out.write(json.dumps(done) + "\n")
            self.out.flush()
            self.out.close()
            try:
                await asyncio.wait_for(self.nc.close(), 5)
            except Exception as e:  # noqa: BLE001
                log("close:", repr(e))
            log(f"done: handled={self.handled} acked={self.acked} ack_failed={self.ack_failed}")
        return 0


def main(argv=None):
    args = parse_args(argv)
    if args.batch < 1 or args.expires <= 0:
        print("--batch must be >= 1 and --expires > 0", file=sys.stderr)
        return 2
    return asyncio.run(Worker(args).run())


if __name__ == "__main__":
    sys.exit(main())
