#!/usr/bin/env python3
"""The client matrix (issue 25): applications written on nats-py, nats.js and
nats.go (tests/apps) run beside each change nats-cutover makes, and what each
saw is measured from its own JSON lines. Run by scripts/client-matrix.sh, which
installs the apps and passes the paths; writes docs/clients.md and a JSON file
of every cell's numbers.

Each cell: a fresh nats-server (loopback, free port, its own store under
/tmp/clients-matrix/), the cell's applications (ready first), a live publisher,
3 s of warm-up, the change (`nats-cutover ... --yes`), 4 s after it ended, then
the publishers stop, the consumers get 3 s to finish, and SIGTERM. Measures:

- lost: messages a publisher had acked (or writes the writer had acked) that the
  application never handled with a successful ack (ordered consumers and
  watchers: never received); for publishers, acked but not stored in the stream
  that holds the subjects at the end.
- twice: messages handled more than once (any line, acked or not: each line is
  a message the application processed); for publishers, stored more than once.
- gap: the longest time between two consecutive messages the application
  handled (all its instances together), from 1 s before the change on; for
  publishers the longest stall (first attempt to ack).
- whole: the time from the change's end until the application had handled
  every message acked before that end (0 if it already had), "never" if some
  never came.
"""

import argparse
import asyncio
import datetime
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import nats
from nats.js import api

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
APPS = os.path.join(ROOT, "tests", "apps")
BASE = "/tmp/clients-matrix"

CLIENTS = ["nats-py", "nats.js", "nats.go"]
STREAM_CHANGES = ["source", "mirror", "in-place"]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def now_ms():
    return int(time.time() * 1000)


class App:
    """One application process; `ready` awaited on its stdout."""

    def __init__(self, name, argv, out, cwd):
        self.name, self.out = name, out
        self.err = open(out + ".err", "w")
        self.ready = threading.Event()
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.err, text=True, cwd=cwd)
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for line in self.p.stdout:
            if line.strip() == "ready":
                self.ready.set()

    def wait_ready(self, timeout=20):
        if not self.ready.wait(timeout):
            raise RuntimeError(f"{self.name} not ready after {timeout}s (see {self.out}.err)")

    def stop(self, timeout=10):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        try:
            self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.err.close()
        return self.p.returncode


def app_argv(a, client, kind, server, out, **kw):
    py, node, go = a.python, "node", a.natsapp
    js = os.path.join(APPS, "js")
    if kind == "publisher":
        common = ["--server", server, "--subject", kw["subject"], "--subjects-count", "4", "--count", "1000000",
                  "--rate", str(kw["rate"]), "--id-prefix", kw["prefix"], "--out", out]
        if kw.get("no_retry"):
            common.append("--no-retry")
        return {"nats-py": [py, os.path.join(APPS, "publisher.py")] + common,
                "nats.js": [node, os.path.join(js, "publisher.mjs")] + common,
                "nats.go": [go, "publisher"] + common}[client]
    if kind == "pullf":  # nats.js: a fetch() loop with a 1 s expiry instead of consume()
        return [node, os.path.join(js, "worker.mjs"), "--server", server, "--stream", kw.get("stream", "ORDERS"),
                "--consumer", "pullf", "--mode", "pull", "--api", "fetch", "--expires", "1000", "--out", out]
    if kind in ("pull", "push", "route"):
        mode = "push" if kind == "push" else "pull"
        common = ["--server", server, "--stream", kw.get("stream", "ORDERS"), "--consumer", kind, "--mode", mode, "--out", out]
        if kind == "route":
            return {"nats-py": [py, os.path.join(APPS, "worker.py")] + common + ["--follow-route"],
                    "nats.js": [node, os.path.join(js, "worker.mjs")] + common
                    + ["--api", "fetch", "--expires", "1000", "--follow-route"],
                    "nats.go": [go, "worker"] + common + ["--follow-route"]}[client]
        return {"nats-py": [py, os.path.join(APPS, "worker.py")] + common,
                "nats.js": [node, os.path.join(js, "worker.mjs")] + common,
                "nats.go": [go, "worker"] + common}[client]
    if kind == "ordered":
        return {"nats-py": [py, os.path.join(APPS, "ordered.py"), "--server", server, "--stream", "ORDERS",
                            "--subject", "orders.>", "--out", out],
                "nats.js": [node, os.path.join(js, "ordered.mjs"), "--server", server, "--stream", "ORDERS", "--out", out],
                "nats.go": [go, "ordered", "--server", server, "--stream", "ORDERS", "--out", out]}[client]
    if kind == "fence":
        return [py, os.path.join(APPS, "fence_worker.py"), "--server", server, "--stream", "ORDERS",
                "--consumer", "fence", "--instance", kw["instance"], "--out", out]
    if kind == "kv-watch":
        return {"nats-py": [py, os.path.join(APPS, "kv_app.py"), "watcher", "--server", server, "--bucket", "CFG", "--out", out],
                "nats.js": [node, os.path.join(js, "kv_watcher.mjs"), "--server", server, "--bucket", "CFG", "--key", "w.>", "--out", out],
                "nats.go": [go, "kv-watch", "--server", server, "--bucket", "CFG", "--key", "w.>", "--out", out]}[client]
    if kind == "kv-get":
        return {"nats-py": [py, os.path.join(APPS, "kv_app.py"), "reader", "--server", server, "--bucket", "CFG", "--out", out],
                "nats.js": [node, os.path.join(js, "kv_get.mjs"), "--server", server, "--bucket", "CFG", "--out", out],
                "nats.go": [go, "kv-get", "--server", server, "--bucket", "CFG", "--out", out]}[client]
    if kind == "obj-get":
        size = str(kw["size"])
        return {"nats-py": [py, os.path.join(APPS, "kv_app.py"), "obj-reader", "--server", server, "--bucket", "FILES",
                            "--objects", "3", "--size", size, "--out", out],
                "nats.js": [node, os.path.join(js, "obj_get.mjs"), "--server", server, "--bucket", "FILES",
                            "--objects", "3", "--size", size, "--out", out],
                "nats.go": [go, "obj-get", "--server", server, "--bucket", "FILES", "--objects", "3", "--size", size, "--out", out]}[client]
    raise ValueError(kind)


def lines(path):
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for ln in f:
            ln = ln.strip()
            if ln:
                try:
                    out.append(json.loads(ln))
                except json.JSONDecodeError:
                    pass
    return out


class Server:
    def __init__(self, a, d):
        self.port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.log = open(os.path.join(d, "nats-server.log"), "w")
        self.p = subprocess.Popen([a.nats_server, "-a", "127.0.0.1", "-p", str(self.port), "-js",
                                   "-sd", os.path.join(d, "store")], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("nats-server did not start")

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.log.close()


# ---------------------------------------------------------------- server-side setup and reads (nats-py)

async def setup_stream(url, kinds):
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(api.StreamConfig(name="ORDERS", subjects=["orders.>"], duplicate_window=120.0,
                                         storage=api.StorageType.FILE))
    for k in kinds:
        if k == "push":
            cfg = api.ConsumerConfig(durable_name="push", ack_policy=api.AckPolicy.EXPLICIT,
                                     deliver_subject="deliver.push", deliver_group="g")
        else:
            cfg = api.ConsumerConfig(durable_name=k, ack_policy=api.AckPolicy.EXPLICIT)
        await js.add_consumer("ORDERS", cfg)
    await nc.close()


async def setup_kv(url):
    nc = await nats.connect(url)
    js = nc.jetstream()
    kv = await js.create_key_value(api.KeyValueConfig(bucket="CFG", history=5, direct=True))
    for n in range(100):
        await kv.put(f"p.{n}", f"p{n}".encode())
    await nc.close()


async def stream_ids(url, stream):
    """msg-id -> how many times the stream stores it."""
    nc = await nats.connect(url)
    js = nc.jetstream(timeout=5)
    counts = {}
    try:
        info = await js.stream_info(stream)
        last = info.state.last_seq
        if info.state.messages:
            sub = await js.subscribe(">", stream=stream, ordered_consumer=True, deliver_policy=api.DeliverPolicy.ALL)
            while True:
                try:
                    m = await sub.next_msg(timeout=5)
                except Exception:  # noqa: BLE001
                    break
                mid = (m.headers or {}).get("Nats-Msg-Id")
                if mid:
                    counts[mid] = counts.get(mid, 0) + 1
                if m.metadata.sequence.stream >= last:
                    break
            await sub.unsubscribe()
    finally:
        await nc.close()
    return counts


# ---------------------------------------------------------------- measures

def consumer_measure(recs, expected, before_end, t_start, t_end, need_ack=True):
    """recs: the app's message lines (all instances). expected: id -> publish ack t_ms."""
    seen_ok = {}
    count = {}
    times = []
    for r in recs:
        mid = r.get("id")
        if mid is None:
            continue
        count[mid] = count.get(mid, 0) + 1
        if (r.get("acked", True) or not need_ack) and mid not in seen_ok:
            seen_ok[mid] = r["t_ms"]
        times.append(r["t_ms"])
    lost = [m for m in expected if m not in seen_ok]
    twice = [m for m, c in count.items() if c > 1]
    times.sort()
    gap = 0
    for x, y in zip(times, times[1:]):
        if y >= t_start - 1000:
            gap = max(gap, y - x)
    missing_before = [m for m in before_end if m not in seen_ok]
    if missing_before or lost:  # an app that misses later messages is not whole either
        whole = None
    else:
        whole = max([seen_ok[m] for m in before_end] + [t_end]) - t_end
    return {"lost": len(lost), "twice": len(twice), "gap_ms": round(gap), "whole_ms": None if whole is None else round(whole),
            "handled": len(recs), "lost_ids": lost[:5], "twice_ids": twice[:5]}


def publisher_measure(recs, stored):
    acked = [r for r in recs if "seq" in r and not r.get("done")]
    failed = [r for r in recs if r.get("failed") is True and "id" in r]
    done = next((r for r in recs if r.get("done")), {})
    lost = [r["id"] for r in acked if stored.get(r["id"], 0) == 0]
    mine = {r["id"] for r in acked} | {r["id"] for r in failed}
    twice = [m for m, c in stored.items() if c > 1 and m in mine]
    errs = {}
    for r in failed:
        e = r.get("error", "")[:60]
        errs[e] = errs.get(e, 0) + 1
    return {"lost": len(lost), "twice": len(twice), "gap_ms": round(done.get("max_stall_ms", 0)),
            "acked": len(acked), "failed": len(failed), "errors": errs, "lost_ids": lost[:5], "twice_ids": twice[:5],
            "retried": sum(1 for r in acked if r.get("attempts", 1) > 1)}


# ---------------------------------------------------------------- cells

def run_cli(a, argv, d, timeout):
    log = os.path.join(d, "cutover.log")
    t0 = now_ms()
    with open(log, "w") as f:
        try:
            rc = subprocess.run([a.cutover] + argv, stdout=f, stderr=subprocess.STDOUT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    return t0, now_ms(), rc, log


def wait_whole(a, watch, pub_files, t_end, key=None):
    """Sleeps until each app in `watch` (kind -> its JSON-lines files) handled every
    id acked before t_end (in pub_files), at least 4 s after t_end, at most
    --whole-cap s; returns the seconds waited after t_end."""
    while True:
        waited = (now_ms() - t_end) / 1000
        if waited >= a.whole_cap:
            return round(waited, 1)
        if waited >= 4:
            exp = set()
            for f in pub_files:
                for r in lines(f):
                    if key:
                        k = key(r)
                        if k and r.get("t", 0) * 1000 <= t_end:
                            exp.add(k)
                    elif "seq" in r and r.get("t_ms", 0) <= t_end:
                        exp.add(r["id"])
            ok = True
            for files in watch.values():
                seen = set()
                for f in files:
                    for r in lines(f):
                        if key:
                            k = key(r)
                            if k:
                                seen.add(k)
                        elif r.get("acked", True) and r.get("id"):
                            seen.add(r["id"])
                if not exp <= seen:
                    ok = False
                    break
            if ok:
                return round(waited, 1)
        time.sleep(0.5)


def stream_cell(a, client, change, answer):
    name = f"{client}-{change}{'' if answer else '-no-answer'}"
    d = os.path.join(BASE, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    srv = Server(a, d)
    apps = {}
    res = {"cell": name, "client": client, "change": change, "answer": answer, "kinds": {}}
    try:
        kinds = ["pull", "push", "route"] + (["pullf"] if client == "nats.js" else [])
        asyncio.run(setup_stream(srv.url, kinds))
        for k in kinds:
            for i in (1, 2):
                apps[f"{k}{i}"] = App(f"{k}{i}", app_argv(a, client, k, srv.url, os.path.join(d, f"{k}{i}.jsonl")),
                                      os.path.join(d, f"{k}{i}.jsonl"), ROOT)
        apps["ordered"] = App("ordered", app_argv(a, client, "ordered", srv.url, os.path.join(d, "ordered.jsonl")),
                              os.path.join(d, "ordered.jsonl"), ROOT)
        for x in apps.values():
            x.wait_ready()
        pubs = {
            "pub": App("pub", app_argv(a, client, "publisher", srv.url, os.path.join(d, "pub.jsonl"),
                                       subject="orders.r", rate=a.rate, prefix="r"), os.path.join(d, "pub.jsonl"), ROOT),
            "pubn": App("pubn", app_argv(a, client, "publisher", srv.url, os.path.join(d, "pubn.jsonl"),
                                         subject="orders.n", rate=a.rate // 2, prefix="n", no_retry=True),
                        os.path.join(d, "pubn.jsonl"), ROOT),
        }
        time.sleep(3)
        if change == "in-place":
            argv = ["--server", srv.url, "run", "--in-place", "ORDERS", "--set", "storage=memory", "--yes"]
        else:
            argv = ["--server", srv.url, "run", "--from", "ORDERS", "--to", "ORDERS_V2", "--all-consumers",
                    "--strategy", change, "--yes"]
        if not answer:
            # The runner answers the windows' publishes by default.
            argv.append("--no-answer-publishes")
        t_start, t_end, rc, log = run_cli(a, argv, d, 180)
        res.update(run_rc=rc, run_s=round((t_end - t_start) / 1000, 2))
        # Wait until every consumer is whole again (or the cap), at least 4 s.
        # In a move, the apps bound to A's name (pull by name, ordered) are not waited for.
        watch = {k: [os.path.join(d, f"{k}{i}.jsonl") for i in (1, 2)] for k in kinds}
        watch["ordered"] = [os.path.join(d, "ordered.jsonl")]
        if change != "in-place":
            watch.pop("pull")
            watch.pop("pullf", None)
            watch.pop("ordered")
        res["waited_s"] = wait_whole(a, watch, [os.path.join(d, "pub.jsonl"), os.path.join(d, "pubn.jsonl")], t_end)
        for p in pubs.values():
            p.stop()
        time.sleep(3)
        for x in apps.values():
            x.stop()
        final = "ORDERS" if change == "in-place" else "ORDERS_V2"
        stored = asyncio.run(stream_ids(srv.url, final))
        prs = lines(os.path.join(d, "pub.jsonl")) + lines(os.path.join(d, "pubn.jsonl"))
        expected = {r["id"]: r["t_ms"] for r in prs if "seq" in r}
        before = [m for m, t in expected.items() if t <= t_end]
        res["kinds"]["publisher (retries)"] = publisher_measure(lines(os.path.join(d, "pub.jsonl")), stored)
        res["kinds"]["publisher (no retry)"] = publisher_measure(lines(os.path.join(d, "pubn.jsonl")), stored)
        labels = {"pull": "pull bound by name", "push": "push queue group", "route": "pull following the route",
                  "pullf": "pull bound by name, fetch loop"}
        for k in kinds:
            recs = [r for i in (1, 2) for r in lines(os.path.join(d, f"{k}{i}.jsonl")) if not r.get("done")]
            res["kinds"][labels[k]] = consumer_measure(recs, expected, before, t_start, t_end)
        recs = [r for r in lines(os.path.join(d, "ordered.jsonl")) if not r.get("done")]
        res["kinds"]["ordered consumer"] = consumer_measure(recs, expected, before, t_start, t_end, need_ack=False)
    finally:
        for x in list(apps.values()):
            if x.p.poll() is None:
                x.stop()
        srv.stop()
    return res


def fence_cell(a):
    name = "nats-py-fence"
    d = os.path.join(BASE, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    srv = Server(a, d)
    apps = {}
    res = {"cell": name, "client": "nats-py", "change": "fence", "answer": True, "kinds": {}}
    try:
        asyncio.run(setup_stream(srv.url, ["fence"]))
        for i in (1, 2):
            apps[f"fence{i}"] = App(f"fence{i}", app_argv(a, "nats-py", "fence", srv.url, os.path.join(d, f"fence{i}.jsonl"),
                                                          instance=f"i{i}"), os.path.join(d, f"fence{i}.jsonl"), ROOT)
        for x in apps.values():
            x.wait_ready()
        pub = App("pub", app_argv(a, "nats-py", "publisher", srv.url, os.path.join(d, "pub.jsonl"),
                                  subject="orders.r", rate=a.rate, prefix="r"), os.path.join(d, "pub.jsonl"), ROOT)
        time.sleep(3)
        t_start, t_end, rc, log = run_cli(a, ["--server", srv.url, "run", "--from", "ORDERS", "--to", "ORDERS_V2",
                                              "--consumer", "fence", "--mode", "fence", "--yes"], d, 180)
        res.update(run_rc=rc, run_s=round((t_end - t_start) / 1000, 2))
        res["waited_s"] = wait_whole(a, {"fence": [os.path.join(d, f"fence{i}.jsonl") for i in (1, 2)]},
                                     [os.path.join(d, "pub.jsonl")], t_end)
        pub.stop()
        time.sleep(3)
        for x in apps.values():
            x.stop()
        stored = asyncio.run(stream_ids(srv.url, "ORDERS_V2"))
        prs = lines(os.path.join(d, "pub.jsonl"))
        expected = {r["id"]: r["t_ms"] for r in prs if "seq" in r}
        before = [m for m, t in expected.items() if t <= t_end]
        res["kinds"]["publisher (retries)"] = publisher_measure(prs, stored)
        recs = [r for i in (1, 2) for r in lines(os.path.join(d, f"fence{i}.jsonl")) if not r.get("done")]
        res["kinds"]["fence instance"] = consumer_measure(recs, expected, before, t_start, t_end)
    finally:
        for x in list(apps.values()):
            if x.p.poll() is None:
                x.stop()
        srv.stop()
    return res


def kv_cell(a, client):
    name = f"{client}-kv"
    d = os.path.join(BASE, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    srv = Server(a, d)
    apps = {}
    res = {"cell": name, "client": client, "change": "kv", "answer": True, "kinds": {}}
    try:
        asyncio.run(setup_kv(srv.url))
        for k in ("kv-watch", "kv-get"):
            apps[k] = App(k, app_argv(a, client, k, srv.url, os.path.join(d, f"{k}.jsonl")), os.path.join(d, f"{k}.jsonl"), ROOT)
        for x in apps.values():
            x.wait_ready()
        until = os.path.join(d, "until")
        writer = subprocess.Popen([a.python, os.path.join(APPS, "kv_app.py"), "writer", "--server", srv.url, "--bucket", "CFG",
                                   "--out", os.path.join(d, "writer.jsonl"), "--rate", str(a.kv_rate), "--until", until],
                                  stderr=open(os.path.join(d, "writer.jsonl.err"), "w"))
        time.sleep(3)
        t_start, t_end, rc, log = run_cli(a, ["--server", srv.url, "kv", "CFG", "--set", "storage=memory", "--yes"], d, 180)
        res.update(run_rc=rc, run_s=round((t_end - t_start) / 1000, 2))
        res["waited_s"] = wait_whole(a, {"watch": [os.path.join(d, "kv-watch.jsonl")]}, [os.path.join(d, "writer.jsonl")], t_end,
                                     key=lambda r: f"{r['key']}@{r['rev']}" if "rev" in r and "key" in r else None)
        open(until, "w").close()
        try:
            writer.wait(20)
        except subprocess.TimeoutExpired:
            writer.kill()
        time.sleep(3)
        for x in apps.values():
            x.stop()
        w = [r for r in lines(os.path.join(d, "writer.jsonl")) if "rev" in r and "i" in r]
        werr = [r for r in lines(os.path.join(d, "writer.jsonl")) if "error" in r]
        wdone = next((r for r in lines(os.path.join(d, "writer.jsonl")) if r.get("done")), {})
        expected = {f"{r['key']}@{r['rev']}": int(r["t"] * 1000) for r in w}
        before = [m for m, t in expected.items() if t <= t_end]
        recs = [{"id": f"{r['key']}@{r['rev']}", "t_ms": int(r["t"] * 1000)}
                for r in lines(os.path.join(d, "kv-watch.jsonl")) if "rev" in r]
        res["kinds"]["KV writer (nats-py)"] = {"lost": None, "twice": None, "gap_ms": round(wdone.get("max_stall_ms", 0)),
                                                "writes": len(w), "errors": len(werr), "whole_ms": None}
        res["kinds"]["KV watcher"] = consumer_measure(recs, expected, before, t_start, t_end, need_ack=False)
        g = next((r for r in lines(os.path.join(d, "kv-get.jsonl")) if r.get("done")), {})
        res["kinds"]["KV get"] = {"lost": None, "twice": None, "gap_ms": round(g.get("longest_wrong_ms", 0)), "whole_ms": None,
                                  "reads": g.get("reads"), "wrong": g.get("wrong"), "not_found": g.get("not_found"),
                                  "errors": g.get("errors")}
    finally:
        for x in list(apps.values()):
            if x.p.poll() is None:
                x.stop()
        srv.stop()
    return res


def obj_cell(a, client):
    name = f"{client}-obj"
    d = os.path.join(BASE, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    srv = Server(a, d)
    apps = {}
    res = {"cell": name, "client": client, "change": "obj", "answer": True, "kinds": {}}
    try:
        subprocess.run([a.python, os.path.join(APPS, "kv_app.py"), "obj-put", "--server", srv.url, "--bucket", "FILES",
                        "--objects", "3", "--size", str(a.obj_size), "--out", os.path.join(d, "put.jsonl")], check=True)
        apps["obj"] = App("obj", app_argv(a, client, "obj-get", srv.url, os.path.join(d, "obj.jsonl"), size=a.obj_size),
                          os.path.join(d, "obj.jsonl"), ROOT)
        apps["obj"].wait_ready()
        time.sleep(2)
        t_start, t_end, rc, log = run_cli(a, ["--server", srv.url, "obj", "FILES", "--set", "storage=memory", "--yes"], d, 180)
        res.update(run_rc=rc, run_s=round((t_end - t_start) / 1000, 2))
        time.sleep(3)
        apps["obj"].stop()
        g = next((r for r in lines(os.path.join(d, "obj.jsonl")) if r.get("done")), {})
        res["kinds"]["object get"] = {"lost": None, "twice": None, "gap_ms": round(g.get("longest_bad_ms", 0)), "whole_ms": None,
                                      "reads": g.get("reads"), "intact": g.get("intact"), "wrong": g.get("wrong"),
                                      "not_found": g.get("not_found"), "errors": g.get("errors")}
    finally:
        for x in list(apps.values()):
            if x.p.poll() is None:
                x.stop()
        srv.stop()
    return res


# ---------------------------------------------------------------- report

def by_design(r, kind):
    """Apps bound to the old stream's name wait there after a move until redeployed
    (README: pull workers follow the route record, push consumers need nothing)."""
    return r["change"] in ("source", "mirror") and kind in ("pull bound by name", "pull bound by name, fetch loop", "ordered consumer")


def fmt_cell(m, r, kind):
    if m is None:
        return "–"
    if by_design(r, kind) and m.get("lost") and not m.get("twice"):
        return f"⏸ waits on ORDERS: {m['lost']} unprocessed · {m['gap_ms']} ms"
    parts = []
    if r.get("run_rc") != 0:
        parts.append(f"the change failed (exit {r.get('run_rc')}) 🔴")
    if m.get("lost") is not None:
        flag = " 🔴" if (m["lost"] or m["twice"]) else ""
        parts.append(f"{m['lost']}/{m['twice']}{flag}")
    if "reads" in m and m.get("reads") is not None:
        # a wrong value or "not found" for what exists is a wrong answer (🔴); an error the app can retry is not
        wrong, nf, err = m.get("wrong") or 0, m.get("not_found") or 0, m.get("errors") or 0
        parts.append(f"{m['reads']} reads: {wrong} wrong, {nf} not found, {err} errors" + (" 🔴" if wrong or nf else ""))
    if "writes" in m:
        parts.append(f"{m['writes']} writes, {m['errors']} errors")
    parts.append(f"{m['gap_ms']} ms")
    if "whole_ms" in m and m.get("lost") is not None:
        never = m["whole_ms"] is None or m["lost"]
        parts.append("never 🔴" if never else f"{m['whole_ms'] / 1000:.2f} s" + (" 🟠" if m["whole_ms"] > 5000 else ""))
    if m.get("failed"):
        parts.append(f"{m['failed']} errors")
    return " · ".join(parts)


KIND_ORDER = ["publisher (retries)", "publisher (no retry)", "pull bound by name", "pull bound by name, fetch loop", "push queue group",
              "pull following the route", "fence instance", "ordered consumer", "KV watcher", "KV get",
              "KV writer (nats-py)", "object get"]
CHANGE_LABEL = {"source": "move, `--strategy source`", "mirror": "move, `--strategy mirror`",
                "in-place": "`run --in-place ORDERS --set storage=memory`", "fence": "move, `--mode fence`",
                "kv": "`kv CFG --set storage=memory`", "obj": "`obj FILES --set storage=memory`"}


def versions(a):
    v = {}
    v["nats-server"] = subprocess.run([a.nats_server, "--version"], capture_output=True, text=True).stdout.strip()
    v["nats-cutover"] = subprocess.run([a.cutover, "--version"], capture_output=True, text=True).stdout.strip()
    v["nats-py"] = subprocess.run([a.python, "-c", "import importlib.metadata as m; print(m.version('nats-py'))"], capture_output=True, text=True).stdout.strip()
    try:
        with open(os.path.join(APPS, "js", "node_modules", "@nats-io", "jetstream", "package.json")) as f:
            v["nats.js"] = "@nats-io/* " + json.load(f)["version"]
    except OSError:
        v["nats.js"] = "?"
    v["node"] = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    v["nats.go"] = a.natsgo_version
    v["go"] = subprocess.run(["go", "version"], capture_output=True, text=True).stdout.strip().replace("go version ", "")
    return v


def report(a, results, elapsed, path, date):
    not_run = [x for r in results if r["cell"] == "not-run" for x in r["not_run"]]
    results = [r for r in results if r["cell"] != "not-run"]
    v = versions(a)
    cores = os.cpu_count()
    out = []
    out.append("# Clients through every change (generated)")
    out.append("")
    out.append("Generated by `scripts/client-matrix.sh" + (" --quick" if a.quick else "") + "` — do not edit by hand; run it again "
               "(it installs the apps with `scripts/install-test-apps.sh`, starts its own nats-server per cell on loopback, "
               f"and rewrites this page). This run: {date} UTC, "
               f"{len(results)} cells in {elapsed / 60:.1f} min, on {cores} cores ({platform.machine()}, shared with other builds).")
    out.append("")
    out.append("Versions: " + "; ".join(f"{k} {x}" for k, x in v.items()) + ".")
    out.append("")
    out.append("Applications: tests/apps (tests/apps/README.md), each written on its client alone. Every cell is a fresh "
               "server, the applications of one client (2 pull workers bound by name to durable `pull`, 2 push workers in "
               "the deliver group of durable `push`, an ordered consumer on ORDERS, 2 workers following the route "
               "on durable `route` (nats.js: a `fetch()` loop); nats.js only: 2 more pull workers on durable `pullf` with a `fetch()` loop, 1 s expiry, "
               f"instead of `consume()` and its defaults), a publisher retrying with the same msg-id at {a.rate} msg/s and one that never retries at "
               f"{a.rate // 2} msg/s (both with msg-ids), 3 s before the change, then until every app is whole again (at least 4 s), then 3 s for the consumers to finish. "
               f"KV cells: a nats-py writer at {a.kv_rate} writes/s, the client's watcher of `w.>` and get loop of 100 keys; "
               f"object cells: three {a.obj_size >> 10} KiB objects read round and round. The definitions are in "
               "scripts/client_matrix.py: **lost/twice** (a publisher: acked but not stored / stored twice in the stream holding "
               "the subjects at the end; a consumer: acked by a publisher but never handled with a successful ack / handled more "
               "than once), the **longest gap** between two handled messages (a publisher: its longest stall), and **whole "
               "again**: from the end of the run until the app had handled every message acked before that end. 🔴 marks a "
               "cell lost > 0, twice > 0, never whole again (within the wait: at least 4 s, at most --whole-cap, "
               f"{a.whole_cap:.0f} s here, after the change), a wrong answer (a wrong value, or \"not found\" for what exists), or a change that failed; 🟠 an app whole again only more than 5 s after the change (issue 25's goal). "
               "⏸ marks an app bound to the old stream's name after a move: a pull worker bound by name or an ordered consumer "
               "keeps waiting on ORDERS (its durable moved to ORDERS_V2, or nothing is stored there any more) until it is "
               "redeployed, as README.md says (pull workers follow the route record, push consumers need nothing); "
               "\"unprocessed\" counts what it had not handled by the end of the cell.")
    out.append("")
    changes = [c for c in ["source", "mirror", "in-place", "fence", "kv", "obj"] if any(r["change"] == c for r in results)]
    for answer in (True, False):
        rs = [r for r in results if r["answer"] == answer]
        if not rs:
            continue
        chs = [c for c in changes if any(r["change"] == c for r in rs)]
        out.append("## " + ("Default flags (the runner answers the commit windows' publishes)" if answer else "With `--no-answer-publishes`") + ": lost/twice · longest gap or stall · whole again")
        out.append("")
        out.append("| kind | client | " + " | ".join(CHANGE_LABEL[c] for c in chs) + " |")
        out.append("|---|---|" + "---|" * len(chs))
        for kind in KIND_ORDER:
            for client in CLIENTS:
                cells = []
                for c in chs:
                    r = next((r for r in rs if r["client"] == client and r["change"] == c), None)
                    cells.append(fmt_cell(r["kinds"].get(kind) if r else None, r, kind))
                if all(x == "–" for x in cells):
                    continue
                out.append(f"| {kind} | {client} | " + " | ".join(cells) + " |")
        out.append("")
        out.append("Run time of each change (s) and exit code: " + "; ".join(
            f"{r['client']} {r['change']} {r['run_s']} (rc {r['run_rc']})" for r in rs) + ".")
        out.append("")
    out.append("## Red flags")
    out.append("")
    out.append("Each 🔴 and 🟠 cell above, with the numbers behind it; the applications' JSON lines and logs of the run are in "
               f"`{BASE}/CELL/` (`KIND1.jsonl`, `KIND1.jsonl.err`, `cutover.log`).")
    out.append("")
    names = {"pull bound by name": "pull", "pull bound by name, fetch loop": "pullf", "push queue group": "push", "pull following the route": "route",
             "ordered consumer": "ordered", "fence instance": "fence", "KV watcher": "kv-watch", "KV get": "kv-get",
             "object get": "obj"}
    for r in results:
        for kind, m in r["kinds"].items():
            bad = r.get("run_rc") != 0 or m.get("lost") or m.get("twice") or m.get("wrong") or m.get("not_found") \
                or (m.get("lost") is not None and "whole_ms" in m and (m["whole_ms"] is None or m["whole_ms"] > 5000))
            if not bad:
                continue
            why = []
            if r.get("run_rc") != 0:
                why.append(f"the change exited {r.get('run_rc')}")
            for k in ("lost", "twice", "wrong", "not_found", "errors"):
                if m.get(k):
                    why.append(f"{k} {m[k]}")
            if m.get("lost_ids"):
                why.append("first lost " + ", ".join(m["lost_ids"][:3]))
            if m.get("lost") is not None and "whole_ms" in m and m["whole_ms"] is None:
                why.append(f"not whole {r.get('waited_s', '?')} s after the change")
            elif m.get("whole_ms") and m["whole_ms"] > 5000:
                why.append(f"whole again only {m['whole_ms'] / 1000:.1f} s after the change (issue 25's goal: 5 s), longest gap {m['gap_ms']} ms")
            if by_design(r, kind) and not m.get("twice"):
                continue
            out.append(f"- `{r['cell']}` {kind}: " + ", ".join(why) + f"; logs `{r['cell']}/{names.get(kind, kind)}*`")
    out.append("")
    out.append("## Publishers that never retry: errors per change")
    out.append("")
    out.append("| client | change | errors with `--no-answer-publishes` | errors by default |")
    out.append("|---|---|---|---|")
    for client in CLIENTS:
        for c in STREAM_CHANGES:
            r0 = next((r for r in results if r["client"] == client and r["change"] == c and not r["answer"]), None)
            r1 = next((r for r in results if r["client"] == client and r["change"] == c and r["answer"]), None)
            if not r0 and not r1:
                continue

            def e(r):
                if not r:
                    return "–"
                m = r["kinds"]["publisher (no retry)"]
                kinds = ", ".join(f"{n}× {k}" for k, n in m["errors"].items())
                return f"{m['failed']} of {m['failed'] + m['acked']}" + (f" ({kinds})" if kinds else "")
            out.append(f"| {client} | {CHANGE_LABEL[c]} | {e(r0)} | {e(r1)} |")
    out.append("")
    out.append("## Gaps (not measured here)")
    out.append("")
    if not_run:
        out.append(f"- Not run in this run, past the {a.budget_min:.0f} min budget: " + "; ".join(not_run) + ".")
    out.append("- `--strategy dual-write`: applies to publishers that follow docs/protocol.md *Dual-write* (the nats-py "
               "`dual_publisher.py`), not to these plain publishers; not in this matrix.")
    out.append("- Fence mode with the nats.js and nats.go instances: not a matrix cell; tested in "
               "`fence::nats_js_and_nats_go_instances_move_through_a_fence_exactly` and "
               "`fence::rolling_upgrade_from_nats_js_to_nats_go_instances` (and docs/protocol.md *Conformance*).")
    out.append("- Pull workers bound by name and ordered consumers are bound to the old stream's name: after a move they "
               "wait on ORDERS until redeployed (README: pull workers follow through the route record, push consumers need "
               "nothing), so their move cells are ⏸ by design; in place they keep the name. Their redeploy onto ORDERS_V2 is not measured.")
    out.append("")
    out.append("## Every cell")
    out.append("")
    out.append("```json")
    for r in results:
        out.append(json.dumps(r, sort_keys=True))
    out.append("```")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--python", required=True)
    p.add_argument("--natsapp", required=True)
    p.add_argument("--natsgo-version", required=True)
    p.add_argument("--nats-server", required=True)
    p.add_argument("--cutover", required=True)
    p.add_argument("--out", default=os.path.join(ROOT, "docs", "clients.md"))
    p.add_argument("--json", default=os.path.join(BASE, "results.json"))
    p.add_argument("--quick", action="store_true")
    p.add_argument("--rate", type=int, default=200)
    p.add_argument("--kv-rate", type=int, default=100)
    p.add_argument("--obj-size", type=int, default=1 << 20)
    p.add_argument("--whole-cap", type=float, help="longest wait, after a change, for the apps to be whole again (s; default 90, --quick 45)")
    p.add_argument("--budget-min", type=float, default=20.0, help="start no cell after this many minutes (the rest are named as not run)")
    p.add_argument("--only", help="comma list of cell names (e.g. nats.js-in-place,nats.go-kv)")
    p.add_argument("--elapsed-min", type=float, help=argparse.SUPPRESS)
    p.add_argument("--date", help=argparse.SUPPRESS)
    p.add_argument("--report-only", metavar="JSON", help="write the page again from a results file (its cells and elapsed time)")
    a = p.parse_args()
    os.makedirs(BASE, exist_ok=True)
    if a.whole_cap is None:
        a.whole_cap = 45.0 if a.quick else 90.0
    if a.report_only:
        with open(a.report_only) as f:
            saved = json.load(f)
        if isinstance(saved, list):  # the first runs' format: the cells alone
            saved = {"cells": saved, "elapsed_s": a.elapsed_min * 60, "date": a.date}
        a.quick = saved.get("quick", False)
        for k in ("whole_cap", "rate", "kv_rate", "obj_size"):
            setattr(a, k, saved.get(k, getattr(a, k)))
        report(a, saved["cells"], saved["elapsed_s"], a.out, saved.get("date"))
        return
    plan = []
    if a.quick:
        for c in CLIENTS:
            plan.append(("stream", c, "in-place", False))
        plan.append(("stream", "nats.js", "source", False))
        plan.append(("kv", "nats.js"))
        plan.append(("obj", "nats.go"))
    else:
        for c in CLIENTS:
            for ch in STREAM_CHANGES:
                for ans in (False, True):
                    plan.append(("stream", c, ch, ans))
        plan.append(("fence",))
        for c in CLIENTS:
            plan.append(("kv", c))
            plan.append(("obj", c))
    t0 = time.time()
    results = []
    skipped = []
    for cell in plan:
        if time.time() - t0 > a.budget_min * 60:
            skipped.append(cell)
            continue
        nm = {"stream": lambda c, ch, ans: f"{c}-{ch}{'' if ans else '-no-answer'}", "kv": lambda c: f"{c}-kv",
              "obj": lambda c: f"{c}-obj", "fence": lambda: "nats-py-fence"}[cell[0]](*cell[1:])
        if a.only and nm not in a.only.split(","):
            continue
        print(f"[{time.time() - t0:6.0f}s] {nm}", file=sys.stderr, flush=True)
        try:
            if cell[0] == "stream":
                r = stream_cell(a, *cell[1:])
            elif cell[0] == "kv":
                r = kv_cell(a, cell[1])
            elif cell[0] == "obj":
                r = obj_cell(a, cell[1])
            else:
                r = fence_cell(a)
        except Exception as e:  # noqa: BLE001 - a cell that cannot run is reported, the rest go on
            import traceback
            traceback.print_exc()
            print(f"  cell {nm} failed to run: {e!r}", file=sys.stderr, flush=True)
            continue
        results.append(r)
        summary = {k: (m.get("lost"), m.get("twice"), m.get("gap_ms"), m.get("whole_ms"), m.get("failed")) for k, m in r["kinds"].items()}
        print(f"  run {r.get('run_s')} s rc {r.get('run_rc')}: {summary}", file=sys.stderr, flush=True)
    elapsed = time.time() - t0
    if skipped:
        print(f"not run (past the {a.budget_min} min budget): {skipped}", file=sys.stderr)
        results.append({"cell": "not-run", "client": "", "change": "", "answer": None, "kinds": {},
                        "not_run": [" ".join(str(x) for x in c) for c in skipped]})
    date = datetime.datetime.utcnow().strftime('%Y-%m-%d %H:%M')
    with open(a.json, "w") as f:
        json.dump({"quick": a.quick, "elapsed_s": elapsed, "date": date, "whole_cap": a.whole_cap, "rate": a.rate,
                   "kv_rate": a.kv_rate, "obj_size": a.obj_size, "cells": results}, f, indent=1)
    report(a, results, elapsed, a.out, date)
    print(f"wrote {a.out} ({len(results)} cells, {elapsed / 60:.1f} min); cells' logs under {BASE}", file=sys.stderr)


if __name__ == "__main__":
    main()
