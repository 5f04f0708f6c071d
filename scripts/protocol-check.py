#!/usr/bin/env python3
"""Conformance check for an application instance of docs/protocol.md (fence mode).

Drives a real nats-server through `nats-cutover run` in fence mode, fence
mode with an instance killed holding messages, rolling mode and a rollback,
with a nats-py publisher (tests/apps/publisher.py) and instances started from
--instance-cmd, then checks that every acknowledged publish was processed
exactly once across the instances, and names every rule it saw broken.

The instance command gets these flags appended (as tests/apps/fence_worker.py
and tests/apps/js/fence_worker.mjs take them):
    --server URL --stream ORDERS --consumer C --instance ID --out FILE --app-version V
It prints `ready` on stdout once registered and fetching, writes one JSON line
per processed message to FILE ({"id": Nats-Msg-Id, "stream", "seq", "acked", ...};
optionally, before the ack, {"begin": Nats-Msg-Id, "stream", "seq"}),
exits 0 on SIGTERM after deleting its registration. docs/protocol.md,
*Conformance*, says how to run it.

Prints one JSON line per scenario and a summary; exit 0 when every scenario
was exact and no rule was broken.
"""

import argparse
import asyncio
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time

import nats
import nats.js.errors
from nats.js import api

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIGRATION = "ORDERS.ORDERS_V2"


def log(*p):
    print(time.strftime("%H:%M:%S"), "protocol-check:", *p, file=sys.stderr, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def read_lines(path):
    out = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
    except FileNotFoundError:
        pass
    return out


class Instance:
    def __init__(self, sc, name, version, extra=""):
        self.name, self.version = name, version
        self.out = os.path.join(sc.dir, f"inst-{name}.jsonl")
        cmd = shlex.split(sc.args.instance_cmd) + shlex.split(sc.args.instance_args) + shlex.split(extra)
        cmd += ["--server", sc.url, "--stream", "ORDERS", "--consumer", "C", "--instance", name,
                "--out", self.out, "--app-version", version]
        self.err = open(os.path.join(sc.dir, f"inst-{name}.log"), "w")
        self.p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=self.err, text=True)
        self.killed = False

    def wait_ready(self, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            line = self.p.stdout.readline()
            if line.strip() == "ready":
                return
            if line == "" and self.p.poll() is not None:
                raise RuntimeError(f"instance {self.name} exited ({self.p.returncode}) before ready")
        raise RuntimeError(f"instance {self.name} not ready in {timeout}s")

    def stop(self, timeout=20):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return "hung"

    def kill(self):
        self.p.kill()
        self.p.wait()
        self.killed = True


class Scenario:
    def __init__(self, args, name, run_no):
        self.args, self.name = args, name
        self.dir = os.path.join(args.out_dir, f"{name}-{run_no}")
        os.makedirs(self.dir, exist_ok=True)
        self.port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.instances = []
        self.broken = []  # (rule, detail)
        self.server = None
        self.pub = None

    # ---- processes --------------------------------------------------------

    def start_server(self):
        store = os.path.join(self.dir, "store")
        self.server_log = open(os.path.join(self.dir, "server.log"), "w")
        self.server = subprocess.Popen(
            [self.args.nats_server, "-a", "127.0.0.1", "-p", str(self.port), "-js", "-sd", store],
            stdout=self.server_log, stderr=subprocess.STDOUT)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("nats-server did not start")

    def start_instance(self, name, version, extra=""):
        i = Instance(self, name, version, extra)
        i.wait_ready()
        self.instances.append(i)
        return i

    def start_publisher(self):
        self.pub_out = os.path.join(self.dir, "pub.jsonl")
        cmd = [self.args.python, os.path.join(ROOT, "tests/apps/publisher.py"), "--server", self.url,
               "--subject", "orders.new", "--subjects-count", "4", "--count", str(self.args.count),
               "--rate", str(self.args.rate), "--id-prefix", f"{self.name}", "--out", self.pub_out,
               "--retry-horizon", "60"]
        self.pub = subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                    stderr=open(os.path.join(self.dir, "pub.log"), "w"))

    def published(self):
        return sum(1 for l in read_lines(self.pub_out) if "seq" in l)

    def cli(self, argv, env=None, timeout=300):
        e = dict(os.environ)
        e.pop("NATS_CUTOVER_TEST_CRASH_AFTER", None)
        e.update(env or {})
        t0 = time.time()
        p = subprocess.run([self.args.cli, "--server", self.url, "--json"] + argv, env=e,
                           capture_output=True, text=True, timeout=timeout)
        with open(os.path.join(self.dir, "cli.log"), "a") as f:
            f.write(f"$ {' '.join(argv)}\n-> {p.returncode} in {time.time() - t0:.1f}s\n{p.stdout}\n{p.stderr}\n")
        return p

    def cli_bg(self, argv, env=None):
        e = dict(os.environ)
        e.pop("NATS_CUTOVER_TEST_CRASH_AFTER", None)
        e.update(env or {})
        self.run_out = os.path.join(self.dir, "run.jsonl")
        self.run_err = os.path.join(self.dir, "run.err")
        return subprocess.Popen([self.args.cli, "--server", self.url, "--json"] + argv, env=e,
                                stdout=open(self.run_out, "w"), stderr=open(self.run_err, "w"))

    # ---- KV ---------------------------------------------------------------

    async def connect(self):
        self.nc = await nats.connect(self.url)
        self.js = self.nc.jetstream()

    async def setup_stream(self):
        await self.js.add_stream(api.StreamConfig(name="ORDERS", subjects=["orders.>"]))
        await self.js.add_consumer("ORDERS", api.ConsumerConfig(
            durable_name="C", ack_policy=api.AckPolicy.EXPLICIT, ack_wait=5.0))

    async def route(self):
        try:
            kv = await self.js.key_value("CUTOVER")
            e = await kv.get("route.ORDERS.C")
            return json.loads(e.value)
        except (nats.js.errors.BucketNotFoundError, nats.js.errors.KeyNotFoundError):
            return None

    async def until_route(self, pred, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            r = await self.route()
            if pred(r):
                return r
            await asyncio.sleep(0.01)
        raise RuntimeError("route never reached the awaited state")

    async def until_published(self, n, timeout=60):
        deadline = time.time() + timeout
        while self.published() < n and time.time() < deadline:
            await asyncio.sleep(0.05)

    async def records(self):
        kv = await self.js.key_value("CUTOVER")
        out = {}
        for k in await self.registrations():
            try:
                out[k] = json.loads((await kv.get(k)).value)
            except Exception:  # noqa: BLE001
                pass
        return out

    async def registrations(self):
        try:
            kv = await self.js.key_value("CUTOVER")
            keys = await kv.keys()
        except Exception:  # noqa: BLE001 - no keys
            return []
        return [k for k in keys if k.startswith("inst.ORDERS.C.")]

    # ---- the end ----------------------------------------------------------

    def processed(self):
        """Every message an instance processed: its lines with "acked"; for an
        instance killed, also each `begin` line (processed, its ack under way)
        that has no line of its own: a kill after the ack landed and before the
        line was written would otherwise read as lost."""
        lines = []
        for i in self.instances:
            mine = read_lines(i.out)
            done = [dict(l, _inst=i.name) for l in mine if "seq" in l and "acked" in l]
            lines += done
            if i.killed:
                ids = {l["id"] for l in done}
                lines += [dict(l, id=l["begin"], _inst=i.name, _begin_only=True, acked=None)
                          for l in mine if "begin" in l and l["begin"] not in ids]
        return lines

    async def finish(self):
        """Waits for the publisher, then until every acked id was processed."""
        try:
            await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, self.pub.wait), 120)
        except asyncio.TimeoutError:
            self.broken.append(("harness", "the publisher did not finish in 120 s"))
            self.pub.kill()
        acked = {l["id"] for l in read_lines(self.pub_out) if "seq" in l}
        deadline = time.time() + self.args.drain_timeout
        while time.time() < deadline:
            seen = {l["id"] for l in self.processed()}
            if acked <= seen:
                break
            await asyncio.sleep(0.2)
        # Late duplicates: a message whose ack was lost comes back after the
        # durable's ack_wait (5 s).
        await asyncio.sleep(self.args.settle_after)
        for i in self.instances:
            if i.killed:
                continue
            code = i.stop()
            done = [l for l in read_lines(i.out) if l.get("done")]
            if code != 0:
                self.broken.append(("stop cleanly", f"instance {i.name} exited {code} on SIGTERM"))
            elif not done:
                self.broken.append(("stop cleanly", f"instance {i.name} wrote no done line"))
        left = [k for k in await self.registrations()
                if not any(i.killed and k.endswith("." + i.name) for i in self.instances)]
        if left:
            self.broken.append(("delete the registration when stopping", ", ".join(left)))

    def verdict(self, fence=None, above_fence_allowed=False):
        pub = read_lines(self.pub_out)
        acked = [l["id"] for l in pub if "seq" in l]
        failed = [l["id"] for l in pub if l.get("failed")]
        counts = {}
        lines = self.processed()
        for l in lines:
            counts[l["id"]] = counts.get(l["id"], 0) + 1
        lost = [i for i in acked if counts.get(i, 0) == 0]
        twice = [i for i, n in counts.items() if n > 1]
        # Processed by the instance killed, its ack not confirmed, and delivered
        # again: JetStream's at-least-once across a crash between processing
        # and acknowledging, which no protocol prevents (the idempotency guard
        # does). Counted, not a broken rule.
        at_kill = [i for i in twice if sum(1 for l in lines if l["id"] == i and l.get("_begin_only")) == 1
                   and counts[i] == 2]
        twice = [i for i in twice if i not in at_kill]
        if fence is not None and not above_fence_allowed:
            above = [l for l in lines if l["stream"] == "ORDERS" and l["seq"] > fence]
            if above:
                self.broken.append(("never process above F from the old consumer",
                                    f"{len(above)} message(s), e.g. seq {above[0]['seq']} by {above[0]['_inst']}"))
        # A message confirmed acknowledged, then delivered and processed again:
        # the retry of the double ack never reached the server.
        again = []
        first_acked = {}
        for l in sorted(lines, key=lambda l: l.get("t_ms", 0)):
            if l["id"] in first_acked and l.get("delivered", 1) > 1 and first_acked[l["id"]]["stream"] == l["stream"]:
                again.append(l["id"])
            if l.get("acked") and l["id"] not in first_acked:
                first_acked[l["id"]] = l
        if again:
            self.broken.append(("retry the double ack by sending +ACK again until the server confirms it",
                                f"{len(again)} message(s) reported acked, then redelivered, e.g. {again[0]}"))
        if twice:
            ex = [(l["_inst"], l["stream"], l["seq"]) for l in lines if l["id"] == twice[0]]
            self.broken.append(("each message processed once", f"{len(twice)} twice, e.g. {twice[0]}: {ex}"))
        if lost:
            self.broken.append(("each acked publish processed", f"{len(lost)} lost, e.g. {lost[:3]}"))
        unacked = sum(1 for l in lines if not l.get("acked"))
        return {
            "scenario": self.name,
            "published_acked": len(acked),
            "publish_failed": len(failed),
            "processed": len(lines),
            "lost": len(lost),
            "twice": len(twice),
            "twice_at_kill": len(at_kill),
            "acks_unconfirmed": unacked,
            "by_instance": {i.name: sum(1 for l in lines if l["_inst"] == i.name) for i in self.instances},
            "fence": fence,
            "broken": [f"{r}: {d}" for r, d in self.broken],
        }

    def close(self):
        for i in self.instances:
            if i.p.poll() is None:
                i.p.kill()
        if self.pub and self.pub.poll() is None:
            self.pub.kill()
        if self.server:
            self.server.terminate()
            self.server.wait(10)


def run_events(path):
    return read_lines(path)


def fence_of_events(events):
    for e in events:
        s = json.dumps(e)
        if '"fenced"' in s and '"fence"' in s:
            d = e.get("detail") or e
            for v in (d, d.get("progress") if isinstance(d, dict) else None):
                if isinstance(v, dict) and isinstance(v.get("fence"), int):
                    return v["fence"]
    for e in events:  # any event that carries a fence
        stack = [e]
        while stack:
            v = stack.pop()
            if isinstance(v, dict):
                if isinstance(v.get("fence"), int):
                    return v["fence"]
                stack += list(v.values())
            elif isinstance(v, list):
                stack += v
    return None


def warnings_of(events, sc):
    for e in events:
        s = json.dumps(e)
        if "fence_unacknowledged" in s or "FenceUnacknowledged" in s:
            sc.broken.append(("acknowledge the fence", s[:300]))


async def wait_run(sc, proc, timeout=240):
    try:
        code = await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, proc.wait), timeout)
    except asyncio.TimeoutError:
        proc.kill()
        code = "timeout"
    if code != 0:
        sc.broken.append(("the run completes", f"nats-cutover run exited {code}: {open(sc.run_err).read()[-400:]}"))
    return code


FENCE_ARGS = ["run", "--from", "ORDERS", "--to", "ORDERS_V2", "--consumer", "C", "--yes",
              "--nak-delay", "1s", "--lease-ttl", "2s"]


async def scenario(args, name, run_no):
    sc = Scenario(args, name, run_no)
    t0 = time.time()
    try:
        sc.start_server()
        await sc.connect()
        await sc.setup_stream()
        if name == "rolling":
            sc.start_instance("a1", "1")
            sc.start_instance("b1", "1")
            sc.start_instance("c2", "2")
        else:
            sc.start_instance("a", args.app_version, args.fault_args if name == "fence" else "")
            sc.start_instance("b", args.app_version, args.kill_args if name == "kill" else "")
            sc.start_instance("c", args.app_version)
        sc.start_publisher()
        await sc.until_published(args.count // 5)
        fence = None
        allowed_above = False
        if name in ("fence", "kill"):
            run = sc.cli_bg(FENCE_ARGS + ["--mode", "fence"])
            if name == "kill":
                r = await sc.until_route(lambda r: r is not None and r.get("state") == "fenced")
                victim = sc.instances[1]
                victim.kill()
                log(f"{name}: killed instance {victim.name} at the fence {r.get('fence')}")
            await wait_run(sc, run)
            events = run_events(sc.run_out)
            fence = fence_of_events(events)
            warnings_of(events, sc) if name == "fence" else None
        elif name == "rolling":
            run = sc.cli_bg(FENCE_ARGS + ["--mode", "rolling", "--new-version", "2"])
            await sc.until_route(lambda r: r is not None and r.get("state") == "moved", timeout=120)
            # Replace the old version one by one.
            for old in [i for i in sc.instances if i.version == "1"]:
                await asyncio.sleep(0.5)
                sc.start_instance(old.name.replace("1", "") + "2", "2")
                code = old.stop()
                if code != 0:
                    sc.broken.append(("stop cleanly", f"instance {old.name} exited {code}"))
            await wait_run(sc, run)
            events = run_events(sc.run_out)
            fence = fence_of_events(events)
            warnings_of(events, sc)
        elif name == "rollback":
            p = sc.cli(FENCE_ARGS + ["--mode", "fence"], env={"NATS_CUTOVER_TEST_CRASH_AFTER": "consumer_fenced:C"})
            if p.returncode != 86:
                sc.broken.append(("harness", f"the runner was to die after the fence (86), exited {p.returncode}"))
            fence = fence_of_events(read_lines_str(p.stdout))
            await asyncio.sleep(1.0)  # the instances work under the fence
            deadline = time.time() + 60
            while True:
                p = sc.cli(["rollback", MIGRATION, "--lease-ttl", "2s"])
                if p.returncode == 0 or time.time() > deadline or "is held by runner" not in p.stderr:
                    break
                await asyncio.sleep(0.2)
            if p.returncode != 0:
                sc.broken.append(("the rollback completes", f"exited {p.returncode}: {p.stderr[-400:]}"))
            if await sc.route() is not None:
                sc.broken.append(("harness", "the route is still there after the rollback"))
            # Back on the home binding, with the new durable gone.
            await asyncio.sleep(3.0)
            for k, r in (await sc.records()).items():
                if any(b.startswith("ORDERS_V2/") for b in r.get("bound", [])):
                    sc.broken.append(("a deleted or purged route record means no record: back to the home binding",
                                      f"{k} still bound to {r['bound']} after the rollback"))
            allowed_above = True  # after the rollback the old consumer delivers above F again
        await sc.finish()
        v = sc.verdict(fence, allowed_above)
        v["seconds"] = round(time.time() - t0, 1)
        return v
    except Exception as e:  # noqa: BLE001
        log(f"{name}: {e!r}")
        return {"scenario": name, "error": repr(e), "broken": [f"harness: {e!r}"]}
    finally:
        try:
            await sc.nc.close()
        except Exception:  # noqa: BLE001
            pass
        sc.close()


def read_lines_str(s):
    out = []
    for line in s.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--instance-cmd", required=True, help="command starting one instance (flags are appended)")
    p.add_argument("--instance-args", default="", help="extra flags for every instance")
    p.add_argument("--fault-args", default="", help="scenario fence: extra flags for instance a (e.g. --lose-acks 25)")
    p.add_argument("--kill-args", default="", help="scenario kill: extra flags for the instance killed (e.g. --work-ms 20)")
    p.add_argument("--app-version", default="1")
    p.add_argument("--scenarios", default="fence,kill,rolling,rollback")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--count", type=int, default=3000)
    p.add_argument("--rate", type=float, default=300)
    p.add_argument("--drain-timeout", type=float, default=60,
                   help="seconds to wait for every acked publish to be processed")
    p.add_argument("--settle-after", type=float, default=6.0,
                   help="seconds to wait after that for late redeliveries (ack_wait is 5 s)")
    p.add_argument("--cli", default=os.environ.get("NATS_CUTOVER", "nats-cutover"))
    p.add_argument("--nats-server", default=os.environ.get("NATS_SERVER", "nats-server"))
    p.add_argument("--python", default=sys.executable, help="python with nats-py, for the publisher")
    p.add_argument("--out-dir", default=f"/tmp/protocol-check-{os.getpid()}")
    args = p.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    results = []
    for r in range(1, args.rounds + 1):
        for name in args.scenarios.split(","):
            log(f"round {r}: {name}")
            v = asyncio.run(scenario(args, name, r))
            v["round"] = r
            print(json.dumps(v), flush=True)
            results.append(v)
    bad = [v for v in results if v.get("broken")]
    summary = {
        "summary": True,
        "runs": len(results),
        "messages": sum(v.get("published_acked", 0) for v in results),
        "lost": sum(v.get("lost", 0) for v in results),
        "twice": sum(v.get("twice", 0) for v in results),
        "twice_at_kill": sum(v.get("twice_at_kill", 0) for v in results),
        "failed_runs": len(bad),
        "out_dir": args.out_dir,
    }
    print(json.dumps(summary), flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
