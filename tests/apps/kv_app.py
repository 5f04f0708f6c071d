#!/usr/bin/env python3
"""KV applications written with plain nats-py, standing for a user's apps.

Roles (the first argument):

writer   Writes key w.{i % --keys} for i = 0, 1, ... at about --rate writes/s
         until the file --until exists: even i with put, odd i with an update
         checked against the revision it just read (create when the key does not
         exist yet). The value of write i is str(i). A write that fails with no
         responders (nothing stored: the subject is moving) is retried at once,
         up to 10 s; a wrong-last-sequence answer (someone else wrote, or the
         read was older) reads again and retries. Before the first write it
         reads the revisions of keys p.0 .. p.{--held - 1}; after the loop it
         updates each of them with the revision it read then ("held"), which
         must still succeed. Output (--out), JSON lines:
           {"i", "key", "rev", "op", "attempts", "stall_ms", "t"}  a write (t: epoch s)
           {"held": key, "rev", "new_rev"} | {"held": key, "error"}
           {"done": true, "writes", "max_stall_ms", "conflicts", "errors"}

watcher  Watches w.> (updates only) and writes one line per entry it sees:
           {"key", "rev", "value", "t"}  ... {"done": true}   (on SIGTERM)

obj-put    Puts --objects objects o{k} of --size bytes into the object store
           --bucket (content: a repeating pattern seeded by k), creating it
           (with --replicas, default 1).
obj-check  Reads them back: {"name", "size", "intact"} per object, then
           {"done": true}.
obj-reader Reads o0 .. o{--objects - 1} round and round (1 ms apart) until
           SIGTERM or --until, comparing each with what obj-put wrote; prints
           `ready` once the store is open:
             {"done": true, "reads", "intact", "wrong", "not_found", "errors",
              "longest_bad_ms"}

reader   Reads p.{--first + j % (--keys - --first)} in a loop until --until exists, expecting the
         value "p{j}" written before it started; counts answers by kind:
           {"done": true, "reads", "right", "wrong", "not_found", "errors",
            "longest_wrong_ms"}
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


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("role", choices=["writer", "watcher", "reader", "obj-put", "obj-check", "obj-reader"])
    p.add_argument("--objects", type=int, default=3)
    p.add_argument("--size", type=int, default=8 << 20, help="obj-put: bytes per object")
    p.add_argument("--server", required=True)
    p.add_argument("--bucket", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--keys", type=int, default=100)
    p.add_argument("--rate", type=float, default=200.0)
    p.add_argument("--held", type=int, default=0)
    p.add_argument("--first", type=int, default=0, help="reader: first key index")
    p.add_argument("--until", help="stop when this file exists (writer, reader)")
    p.add_argument("--replicas", type=int, default=1, help="obj-put: the object store's replicas")
    return p.parse_args()


def emit(out, rec):
    out.write(json.dumps(rec) + "\n")
    out.flush()


async def write_once(kv, key, value, op):
    """One write with the retries an application needs; returns (rev, attempts)."""
    attempts, first = 0, time.monotonic()
    while True:
        attempts += 1
        try:
            if op == "put":
                return await kv.put(key, value), attempts, 0
            try:
                last = (await kv.get(key)).revision
            except nats.js.errors.KeyNotFoundError:
                return await kv.create(key, value), attempts, 0
            return await kv.update(key, value, last=last), attempts, 0
        except (nats.js.errors.KeyWrongLastSequenceError, nats.js.errors.KeyNotFoundError):
            # (create answers "not found" when the key exists but its read
            # says it does not: an older copy answered the read.)
            await asyncio.sleep(0.001)
            return None, attempts, 1  # caller retries with a fresh read
        except (nats.errors.NoRespondersError, nats.js.errors.NoStreamResponseError):
            if time.monotonic() - first > 10:
                raise
            await asyncio.sleep(0.001)


async def writer(a, js, out, stop):
    kv = await js.key_value(a.bucket)
    held = {}
    for j in range(a.held):
        held[f"p.{j}"] = (await kv.get(f"p.{j}")).revision
    i, max_stall, conflicts, errors = 0, 0.0, 0, 0
    start = time.monotonic()
    while not stop.is_set() and not (a.until and os.path.exists(a.until)):
        key, op = f"w.{i % a.keys}", "put" if i % 2 == 0 else "update"
        t0 = time.monotonic()
        tries = 0
        while True:
            try:
                rev, n, conflict = await write_once(kv, key, str(i).encode(), op)
            except Exception as e:  # noqa: BLE001 - recorded, the test fails on it
                errors += 1
                emit(out, {"i": i, "key": key, "error": repr(e)})
                rev = None
                break
            tries += n
            conflicts += conflict
            if rev is not None:
                break
        stall = (time.monotonic() - t0) * 1000
        max_stall = max(max_stall, stall)
        if rev is not None:
            emit(out, {"i": i, "key": key, "rev": rev, "op": op, "attempts": tries, "stall_ms": round(stall, 2), "t": time.time()})
        i += 1
        if a.rate > 0:
            await asyncio.sleep(max(0.0, start + i / a.rate - time.monotonic()))
    for key, rev in held.items():
        try:
            new = await kv.update(key, b"held", last=rev)
            emit(out, {"held": key, "rev": rev, "new_rev": new})
        except Exception as e:  # noqa: BLE001
            emit(out, {"held": key, "rev": rev, "error": repr(e)})
    emit(out, {"done": True, "writes": i, "max_stall_ms": round(max_stall, 2), "conflicts": conflicts, "errors": errors})


async def watcher(a, js, out, stop):
    kv = await js.key_value(a.bucket)
    w = await kv.watch("w.>", ignore_deletes=False)
    print("ready", flush=True)
    while not stop.is_set():
        try:
            e = await w.updates(timeout=0.2)
        except (nats.errors.TimeoutError, asyncio.TimeoutError):
            continue
        if e is None:
            continue  # the end of the initial values
        emit(out, {"key": e.key, "rev": e.revision, "value": (e.value or b"").decode(), "t": time.time()})
    emit(out, {"done": True})


async def reader(a, js, out, stop):
    kv = await js.key_value(a.bucket)
    c = {"reads": 0, "right": 0, "wrong": 0, "not_found": 0, "errors": 0}
    print("ready", flush=True)
    wrong_since, longest = None, 0.0
    j = 0
    while not stop.is_set() and not (a.until and os.path.exists(a.until)):
        n = a.first + j % (a.keys - a.first)
        try:
            ok = (await kv.get(f"p.{n}")).value == f"p{n}".encode()
            c["right" if ok else "wrong"] += 1
        except nats.js.errors.KeyNotFoundError:
            ok = False
            c["not_found"] += 1
        except Exception:  # noqa: BLE001 - an error the application sees
            ok = False
            c["errors"] += 1
        c["reads"] += 1
        now = time.monotonic()
        if ok:
            if wrong_since is not None:
                longest = max(longest, now - wrong_since)
            wrong_since = None
        elif wrong_since is None:
            wrong_since = now
        j += 1
        await asyncio.sleep(0.001)
    emit(out, {"done": True, **c, "longest_wrong_ms": round(longest * 1000, 1)})


def content(k, size):
    block = bytes((k * 31 + i) % 251 for i in range(4096))
    return (block * (size // len(block) + 1))[:size]


async def obj_put(a, js, out, stop):
    os_ = await js.create_object_store(a.bucket, config=api.ObjectStoreConfig(bucket=a.bucket, replicas=a.replicas))
    for k in range(a.objects):
        await os_.put(f"o{k}", content(k, a.size))
        emit(out, {"put": f"o{k}", "size": a.size})
    emit(out, {"done": True})


async def obj_check(a, js, out, stop):
    os_ = await js.object_store(a.bucket)
    for k in range(a.objects):
        r = await os_.get(f"o{k}")
        emit(out, {"name": f"o{k}", "size": len(r.data), "intact": r.data == content(k, a.size)})
    emit(out, {"done": True})


async def obj_reader(a, js, out, stop):
    os_ = await js.object_store(a.bucket)
    want = [content(k, a.size) for k in range(a.objects)]
    print("ready", flush=True)
    c = {"reads": 0, "intact": 0, "wrong": 0, "not_found": 0, "errors": 0}
    bad_since, longest = None, 0.0
    j = 0
    while not stop.is_set() and not (a.until and os.path.exists(a.until)):
        k = j % a.objects
        ok = False
        try:
            r = await os_.get(f"o{k}")
            ok = r.data == want[k]
            c["intact" if ok else "wrong"] += 1
        except nats.js.errors.ObjectNotFoundError:
            c["not_found"] += 1
        except Exception as e:  # noqa: BLE001 - an error the application sees
            c["errors"] += 1
            if c["errors"] == 1 or c["errors"] % 100 == 0:
                print(time.strftime("%H:%M:%S"), "obj-reader:", f"get o{k} failed:", repr(e), file=sys.stderr, flush=True)
        c["reads"] += 1
        now = time.monotonic()
        if ok:
            if bad_since is not None:
                longest = max(longest, now - bad_since)
            bad_since = None
        elif bad_since is None:
            bad_since = now
        j += 1
        await asyncio.sleep(0.001)
    emit(out, {"done": True, **c, "longest_bad_ms": round(longest * 1000, 1)})


async def main():
    a = parse_args()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for s in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(s, stop.set)
    nc = await nats.connect(a.server, max_reconnect_attempts=-1)
    js = nc.jetstream(timeout=2)
    with open(a.out, "a", buffering=1) as out:
        roles = {"writer": writer, "watcher": watcher, "reader": reader, "obj-put": obj_put, "obj-check": obj_check, "obj-reader": obj_reader}
        await roles[a.role](a, js, out, stop)
    await nc.drain()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(130)
