#!/usr/bin/env python3
"""Rewrites docs/benchmarks.md (above its keep marker) and docs/bench/*.svg from
the benchmarks' JSON in target/bench. Standard library only; scripts/bench.sh
runs it. Every number it prints comes from those files.
Usage: scripts/bench-report.py TARGET_BENCH_DIR DOCS_MD SVG_DIR"""
import json
import math
import os
import statistics
import sys

MARKER = "<!-- scripts/bench.sh keeps everything below this line as written -->"
ORDER = ["manual", "naive-new", "naive-all", "drain", "mirror", "fence", "in-place",
         "dual-write", "no-retry", "no-retry-bridge"]
WHAT = {
    "manual": "the seed's procedure: publishers paused, durable drained (NumPending 0, AckPending 0), one ack_wait, B created (sourcing A) and promoted, new durable, workers switched, publishers resumed",
    "naive-new": "B sources A; new durable on B with DeliverPolicy New; workers switched; A gives up its subjects, B drops the source and takes them",
    "naive-all": "the same with DeliverPolicy All",
    "drain": "the engine: strategy source, mode drain",
    "mirror": "the engine: strategy mirror, mode drain",
    "fence": "the engine: mode fence",
    "in-place": "the engine in place: same name, storage file to memory, two mirror hops",
    "dual-write": "the engine: strategy dual-write (B with subjects v2.orders.>); the library's DualPublisher writes both, then B only; workers guarded by msg-id",
    "no-retry": "the engine: strategy source, mode drain, with a publisher that never retries (one attempt, 5 s ack wait): \"no responders\" in the commit window is a publish error (such a message was never acknowledged, so it is not counted as lost: see the publish errors below the tables)",
    "no-retry-bridge": "the same with run --answer-publishes: the runner answers the commit window's publishes (engine/bridge.rs)",
}


def load(d, name):
    p = os.path.join(d, name + ".json")
    if not os.path.exists(p):
        return None
    with open(p) as f:
        return json.load(f)


def num(x, unit="", digits=None):
    if x is None:
        return "–"
    if digits is None:
        digits = 0 if abs(x) >= 100 or float(x).is_integer() else 1
    return f"{x:,.{digits}f}{unit}"


def mmm(vals, unit="", digits=None):
    """median (min–max) of the values, or the one value."""
    vals = [v for v in vals if v is not None]
    if not vals:
        return "–"
    med = statistics.median_low(sorted(vals))
    if min(vals) == max(vals):
        return num(med, unit, digits)
    return f"{num(med, unit, digits)} ({num(min(vals), '', digits)}–{num(max(vals), unit, digits)})"


def esc(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def bar_chart(path, title, groups, series, value, unit, log=True):
    """Grouped bars: one group per `groups` entry, one bar per series; value(g, s)
    gives the median (None: no bar). Log scale by default."""
    w, h, left, top, bottom = 760, 340, 70, 40, 60
    vals = [value(g, s) for g in groups for s in series]
    vals = [v for v in vals if v is not None and v > 0]
    if not vals:
        return False
    hi = max(vals)
    lo = min(vals)
    if log:
        lo_e, hi_e = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
        hi_e = max(hi_e, lo_e + 1)
        scale = lambda v: (math.log10(max(v, 10 ** lo_e)) - lo_e) / (hi_e - lo_e)
        ticks = [10 ** e for e in range(lo_e, hi_e + 1)]
    else:
        top_v = hi * 1.1
        scale = lambda v: v / top_v
        ticks = [top_v * i / 4 for i in range(5)]
    ph = h - top - bottom
    gw = (w - left - 20) / len(groups)
    bw = gw * 0.8 / len(series)
    colors = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#9c755f"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w/2}" y="18" text-anchor="middle" font-size="14">{esc(title)}</text>']
    for t in ticks:
        y = top + ph * (1 - scale(t))
        out.append(f'<line x1="{left}" x2="{w-20}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left-5}" y="{y+4:.1f}" text-anchor="end">{num(t)}{esc(unit)}</text>')
    for gi, g in enumerate(groups):
        x0 = left + gi * gw + gw * 0.1
        for si, s in enumerate(series):
            v = value(g, s)
            if v is None:
                continue
            bh = ph * scale(v) if v > 0 else 0
            x = x0 + si * bw
            out.append(f'<rect x="{x:.1f}" y="{top+ph-bh:.1f}" width="{bw-2:.1f}" height="{bh:.1f}" fill="{colors[si % len(colors)]}"><title>{esc(str(s))} at {esc(str(g))}: {num(v)}{esc(unit)}</title></rect>')
            out.append(f'<text x="{x + bw/2 - 1:.1f}" y="{top+ph-bh-3:.1f}" text-anchor="middle" font-size="9">{num(v)}</text>')
        label = num(g) if isinstance(g, (int, float)) else str(g)
        out.append(f'<text x="{left + gi*gw + gw/2:.1f}" y="{h-bottom+16}" text-anchor="middle">{esc(label)}</text>')
    lx = left
    for si, s in enumerate(series):
        out.append(f'<rect x="{lx}" y="{h-22}" width="10" height="10" fill="{colors[si % len(colors)]}"/>')
        out.append(f'<text x="{lx+14}" y="{h-13}">{esc(str(s))}</text>')
        lx += 14 + 7 * len(str(s)) + 16
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
    return True


def medof(vals):
    vals = sorted(v for v in vals if v is not None)
    return statistics.median_low(vals) if vals else None


def cells(runs, proc, rate):
    return [r for r in runs if r["procedure"] == proc and r["rate"] == rate]


def procedures_section(p, svg_dir, lines):
    failed = [r for r in p["runs"] if r.get("error")]
    runs = [r for r in p["runs"] if not r.get("error")]
    p["rates"] = sorted(set(p["rates"]))
    lim = p["limits"]
    lines += ["## Procedures side by side", "",
              f"One workload for every procedure: the Rust publisher of `cutover-demo` (msg-ids, retried with the same id, 256 publishes in flight), "
              f"{p['workers']} pull workers following their route (batches of 32, {p['processing_us']} µs of processing, double acks), "
              f"ack_wait {p['ack_wait_s']} s, {p['seconds']} s of publishing with the procedure starting a third of the way in; "
              f"a fresh server per run, {p['runs_per_cell']} runs per cell: median (min–max).", "",
              "**The machine's limit with this workload** (same run): the publisher alone reached "
              f"{num(lim['publish_only_per_s'])} msg/s; the whole workload at rising rates, {lim['step_s']} s each:", "",
              "| rate asked | published | processed | keeps up |", "|---|---|---|---|"]
    for s in lim["ramp"]:
        lines.append(f"| {num(s['rate'])} | {num(s['published'])} | {num(s['processed'])} | {'yes' if s['keeps_up'] else 'no'} |")
    lines += ["", f"The highest rate sustained with acks here is **{num(p['max_rate'])} msg/s** (published and processed at ≥ 95 % of the rate), "
              "so the comparison's top rate is that one.", ""]
    for proc in ORDER:
        lines.append(f"- **{proc}**: {WHAT[proc]}.")
    lines += ["", "Lost: published (acknowledged by JetStream) and never processed, and not pending on the final durable either; "
              "pending: not processed within 30 s after publishing stopped but still pending there (late, not lost). "
              "Stall: the longest a publish waited for its ack, counted from when it fell due while publishers were paused. "
              "Gap: the longest time between two processed messages while publishing went on (pull workers only; push consumers are not measured here). "
              "Procedure: from its first step to its last. The hand-made procedures switch the workers by writing their route record, "
              "instantly: a real redeploy takes longer, so their gaps are a best case.", ""]
    for rate in p["rates"]:
        tag = " (the machine's sustained rate)" if rate == p["max_rate"] else ""
        lines += [f"### {num(rate)} msg/s{tag}", "",
                  "| procedure | lost | duplicated | pending | max publisher stall | max consumer gap | total time of the procedure | stall, gap ÷ manual's | runs |",
                  "|---|---|---|---|---|---|---|---|---|"]
        base = {k: medof([r[k] for r in cells(runs, "manual", rate)]) for k in ("max_publish_stall_ms", "max_consumer_gap_ms")}
        for proc in ORDER:
            c = cells(runs, proc, rate)
            errs = cells(failed, proc, rate)
            if errs:
                lines.append(f"| {proc} | failed in {len(errs)} run(s): {errs[0]['error']} | | | | | | | |")
            if not c:
                continue
            refused = [r for r in c if r.get("refused")]
            if refused:
                lines.append(f"| {proc} | not measured: fence mode not built yet (the plan refuses it: “{refused[0]['refused']}”) | | | | | | | |")
                continue
            col = lambda k, u="", d=None: mmm([r[k] for r in c], u, d)
            ratio = " / ".join(
                num(medof([r[k] for r in c]) / base[k], "×", 3 if medof([r[k] for r in c]) / base[k] < 0.1 else 2) if base[k] else "–"
                for k in ("max_publish_stall_ms", "max_consumer_gap_ms"))
            lines.append(f"| {proc} | {col('lost')} | {col('duplicated')} | {col('pending')} | {col('max_publish_stall_ms', ' ms')} | {col('max_consumer_gap_ms', ' ms')} | {col('procedure_ms', ' ms')} | {ratio} | {len(c)} |")
        lines.append("")
    procs = [x for x in ORDER if any(r["procedure"] == x and not r.get("refused") for r in runs)]
    exact = [x for x in procs if all(r["lost"] == 0 and r["duplicated"] == 0 and r["pending"] == 0 for r in runs if r["procedure"] == x)]
    inexact = [x for x in procs if x not in exact]
    lines.append(f"In every run at every rate, exact (0 lost, 0 duplicated, 0 pending): {', '.join(exact) or 'none'}. "
                 f"Lost, duplicated or pending in at least one run: {', '.join(inexact) or 'none'}.")
    never = [x for x in procs if x.startswith("no-retry")]
    if never:
        per = "; ".join(x + ": " + ", ".join(
            f"{mmm([r.get('publish_failures') or 0 for r in cells(runs, x, g)])} at {num(g)} msg/s"
            for g in p["rates"] if cells(runs, x, g)) for x in never)
        rest = sum(r.get("publish_failures") or 0 for r in runs if r["procedure"] not in never)
        lines.append(f"Publish errors per run, publishers that never retry: {per}; the retrying publisher of every other row: {num(rest)} in all its runs.")
    for x in procs:
        st = [r["max_publish_stall_ms"] for r in runs if r["procedure"] == x]
        gp = [r["max_consumer_gap_ms"] for r in runs if r["procedure"] == x]
        lines.append(f"- {x}: over all its runs, publisher stall {num(min(st), ' ms')} to {num(max(st), ' ms')}, consumer gap {num(min(gp), ' ms')} to {num(max(gp), ' ms')}.")
    lines.append("")
    rates = p["rates"]
    med = lambda key: (lambda g, s: (lambda v: statistics.median_low(v) if v else None)(
        [r[key] for r in cells(runs, s, g) if r.get(key) is not None]))
    charts = []
    if bar_chart(os.path.join(svg_dir, "procedures-stall.svg"), "Max publisher stall (median, log scale) by rate, msg/s", rates, procs, med("max_publish_stall_ms"), " ms"):
        charts.append("![max publisher stall](bench/procedures-stall.svg)")
    if bar_chart(os.path.join(svg_dir, "procedures-gap.svg"), "Max consumer gap (median, log scale) by rate, msg/s", rates, procs, med("max_consumer_gap_ms"), " ms"):
        charts.append("![max consumer gap](bench/procedures-gap.svg)")
    if bar_chart(os.path.join(svg_dir, "procedures-dup.svg"), "Messages processed twice (median; none drawn for 0)", rates, procs, med("duplicated"), ""):
        charts.append("![duplicated](bench/procedures-dup.svg)")
    lines += charts + [""]


def translate_section(t, lines):
    lines += ["## Position translation", "",
              "A holds N empty messages; B sources a filter of varying density (all of the first 20 %, one in seven up to 60 %, "
              "then one in a hundred), the hard case: a source that lines up with A needs one get. Seven checkpoints spread over A "
              "are translated by `translate_once` (direct gets), each timed (one stream info of A and B included).", "",
              "| messages in A | in B | gets: median (max) | bound 2·log2(N)+4 | time: median (min–max) | publish A | B sources A |",
              "|---|---|---|---|---|---|---|"]
    for s in t["sizes"]:
        gets = [x["gets"] for x in s["points"]]
        ms = [x["ms"] for x in s["points"]]
        lines.append(f"| {num(s['messages'])} | {num(s['b_messages'])} | {statistics.median_low(sorted(gets))} ({max(gets)}) | {s['gets_bound']} | "
                     f"{mmm(ms, ' ms', 2)} | {num(s['publish_s'], ' s', 1)} | {num(s['source_s'], ' s', 1)} |")
    if not any(s["messages"] >= 10_000_000 for s in t["sizes"]):
        lines += ["", "10M messages: not in this run (TRANSLATE_SIZES)."]
    lines.append("")


def verify_section(v, lines):
    sizes = v.get("sizes") or [v]
    first = sizes[0]
    lines += ["## verify", "",
              f"A real migration of N messages ({first['payload_bytes']} bytes, msg-ids) plus {num(first['direct'])} published "
              "to B after the commit, on a fresh server per size, then per round: a plain ordered consumer reading all of B (the raw rate, same run), then `verify` "
              "(everything included) with the peak heap it allocated. See [verify.md](verify.md).", "",
              "| messages in A | rounds | verify | raw ordered read of B | verify ÷ raw (goal ≥ 0.5) | peak heap per message (goal ≤ 2) | publish A |",
              "|---|---|---|---|---|---|---|"]
    for z in sizes:
        rounds = z["rounds"]
        lines.append(f"| {num(z['messages'])} | {len(rounds)} | {mmm([r['verify']['per_sec'] for r in rounds], ' msg/s')} | "
                     f"{mmm([r['raw_ordered_read']['per_sec'] for r in rounds], ' msg/s')} | {mmm([r['verify_vs_raw'] for r in rounds], '×', 2)} | "
                     f"{mmm([r['peak_heap_bytes_per_message'] for r in rounds], ' B', 2)} | {num(z.get('publish_seconds'), ' s', 1)} |")
    lines += ["", "Rates and ratios: median (min–max) over the rounds.", ""]


def many_section(m, lines):
    runs = m["runs"]
    lines += ["## Many consumers", "",
              f"N durables of one stream moved by one `run` (strategy source, drain). {m['live']} of them (all, below {m['live']}) have a live "
              f"workload each ({m['rate_per_live']} msg/s on their own subjects, one pull worker following its route, msg-ids and retries); "
              "the others are idle durables on their own subjects. The run starts 2 s into the workloads.", "",
              "| durables | run (pause → commit → retire) | plan | worst drain (pause → checkpoint) | worst durable's move (pause → route on B) | live consumers: worst gap | worst publish stall | lost / duplicated / pending on B | runs |",
              "|---|---|---|---|---|---|---|---|---|"]
    for n in sorted({r["durables"] for r in runs}):
        c = [r for r in runs if r["durables"] == n and not r.get("error")]
        errs = [r for r in runs if r["durables"] == n and r.get("error")]
        if errs:
            lines.append(f"| {num(n)} | **failed** in {len(errs)} of {len(errs) + len(c)} runs after {mmm([r['run_s'] for r in errs], ' s', 1)}: {errs[0]['error']} | | | | | | | |")
        if not c:
            continue
        col = lambda k, u="", d=None: mmm([r[k] for r in c], u, d)
        lost = sum(r["live_lost"] for r in c)
        dup = sum(r["live_duplicated"] for r in c)
        pend = sum(r.get("live_pending_on_b", 0) for r in c)
        lines.append(f"| {num(n)} | {col('run_s', ' s', 1)} | {col('plan_s', ' s', 2)} | {col('worst_drain_ms', ' ms')} | {mmm([r.get('worst_move_gap_ms', 0) for r in c], ' ms')} | {col('live_max_consumer_gap_ms', ' ms')} | {col('live_max_publish_stall_ms', ' ms')} | {lost} / {dup} / {pend} (all runs) | {len(c)} |")
    big = [r["run_s"] for r in runs if r["durables"] >= 1000 and not r.get("error")]
    if any(r["durables"] >= 1000 and r.get("error") for r in runs):
        ok = sorted({r["durables"] for r in runs if not r.get("error")})
        lines += ["", f"Goal: 1,000 durables in under 30 s: **not met**: the run fails (above); the most moved in one run here: {num(ok[-1]) if ok else 'none'}. "
                  "Moving them in batches of fewer durables (several runs, `--consumer` lists) is the workaround until the engine can."]
    elif big:
        medv = statistics.median_low(sorted(big))
        verdict = "met" if medv < 30 else "not met"
        lines += ["", f"Goal: 1,000 durables in under 30 s: {verdict} (median {num(medv, ' s', 1)})."]
    lines.append("")


def sourcing_section(s, svg_dir, lines):
    lines += ["## Where sourcing stops keeping up", "",
              f"B sources (or mirrors) A while a publisher paces publishes (128 bytes) into A at rising rates: plain NATS publishes (no ack "
              f"wait), or JetStream publishes whose acks are awaited pipelined (async, up to {num(s.get('inflight', 4096))} outstanding); "
              f"{s['step_s']} s per rate on one fresh server per strategy and way of publishing. Over the second half of each step: A's and B's ingest rates; B keeps up "
              "when its rate is ≥ 95 % of A's and its lag at the end is under a quarter second of A's ingest. The ramp stops after B "
              "fails two rates, or when A itself ingests under 90 % of the asked rate (then the limit is the server's ingest or the publisher's, not sourcing's).", ""]
    label = lambda st: f"{st['strategy']}, {st.get('publish', 'plain')} publishes"
    for st in s["strategies"]:
        k = st["keeps_up_to"]
        last = st["steps"][-1]
        a_short = last["a_per_s"] < 0.9 * last["rate"]
        top = max((x["a_per_s"] for x in st["steps"] if x["keeps_up"]), default=0)
        verdict = f"B kept up to {num(k)} msg/s asked (A ingesting up to {num(top)} msg/s)" if k else "B did not keep up at any rate tried"
        if all(x["keeps_up"] for x in st["steps"]) and not a_short:
            verdict += f" (every rate tried: where it stops lies above, SOURCING_RATES tries higher ones; the reported 18–21k msg/s ceiling of nats-server issue 8612 did not show with these {st.get('publish', 'plain')} 128-byte publishes)"
        if a_short and all(x["keeps_up"] for x in st["steps"][:-1]):
            verdict += f"; at {num(last['rate'])} msg/s A itself ingested only {num(last['a_per_s'])} msg/s, so sourcing's own ceiling lies above what this machine can publish"
        lines += [f"**{label(st)}**: {verdict}.", "",
                  "| rate asked | A ingested | B ingested | B's lag at the end | keeps up |", "|---|---|---|---|---|"]
        for x in st["steps"]:
            lines.append(f"| {num(x['rate'])} | {num(x['a_per_s'])}/s | {num(x['b_per_s'])}/s | {num(x['lag_at_end'])} | {'yes' if x['keeps_up'] else 'no'} |")
        lines.append("")
    rates = sorted({x["rate"] for st in s["strategies"] for x in st["steps"]})
    series = [f"A ({label(st)})" for st in s["strategies"]] + [f"B ({label(st)})" for st in s["strategies"]]

    def value(g, name):
        for st in s["strategies"]:
            for x in st["steps"]:
                if x["rate"] == g and name == f"A ({label(st)})":
                    return x["a_per_s"]
                if x["rate"] == g and name == f"B ({label(st)})":
                    return x["b_per_s"]
        return None
    if bar_chart(os.path.join(svg_dir, "sourcing.svg"), "Ingest rate of A and B (msg/s) by rate asked", rates, series, value, "", log=False):
        lines += ["![sourcing](bench/sourcing.svg)", ""]


def in_place_section(d, lines):
    runs = d["runs"]
    steps = lambda r, name: sum(ms for s, ms in r["steps"] if s == name)
    col = lambda f, u="", dg=None: mmm([f(r) for r in runs], u, dg)
    lines += ["## In place: a big stream changes storage, live", "",
              f"The live workload ({num(d['rate'])} msg/s, {d['workers']} pull workers, msg-ids with retries, {d.get('seconds', '?')} s) on ORDERS, "
              f"which first gets {num(d.get('preload', 0))} messages of 128 bytes (the durable starts after them); a third into the run ORDERS changes "
              f"to {', '.join(f'{k}={v}' for k, v in (d.get('in_place') or {}).items())} under its own name: two mirror hops through ORDERS_CUTOVER, "
              "each copying the whole stream.", "",
              "| measure | median (min–max) |", "|---|---|",
              f"| published per run | {col(lambda r: r['published'])} |",
              f"| lost / duplicated / pending on B | {sum(r['lost'] for r in runs)} / {sum(r['duplicated'] for r in runs)} / {sum(r.get('pending_on_b', 0) for r in runs)} (all runs) |",
              f"| max publisher stall | {col(lambda r: r['max_publish_stall_ms'], ' ms')} |",
              f"| max consumer gap (pull workers) | {col(lambda r: r['max_consumer_gap_ms'], ' ms')} |",
              f"| whole change (both hops) | {col(lambda r: r['cutover_ms'], ' ms')} |",
              f"| plan's estimate of both copies | {col(lambda r: r.get('estimate_ms') or 0, ' ms')} |",
              f"| both hops' `catch_up` (the copies) | {col(lambda r: steps(r, 'catch_up'), ' ms')} |",
              f"| both commit windows (`move_publishers`) | {col(lambda r: steps(r, 'move_publishers'), ' ms')} |",
              f"| runs | {len(runs)} |", ""]
    # The change starts a third into the run; publishing stops at its end.
    secs = d.get("seconds")

    def last_commit_s(r):
        names = [n for n, _ in r["steps"]]
        if "move_publishers" not in names:
            return 0
        i = len(names) - 1 - names[::-1].index("move_publishers")
        return secs / 3 + sum(ms for _, ms in r["steps"][:i]) / 1000
    late = [r for r in runs if secs and last_commit_s(r) > secs]
    if late:
        lines += [f"In {len(late)} of {len(runs)} runs the second hop's commit window began after publishing had stopped ({secs} s of publishing; "
                  f"it began at {mmm([last_commit_s(r) for r in late], ' s', 1)}): that commit was not under publishing load, so the "
                  "publisher stall above is the first hop's commit's or the copies'. A larger INPLACE_SECONDS keeps the publishers running "
                  "through the whole change.", ""]


def push_section(d, lines):
    runs = d["runs"]
    col = lambda f, u="", dg=None: mmm([f(r) for r in runs], u, dg)
    lines += ["## Push consumers", "",
              f"The live workload ({num(d['rate'])} msg/s, {d['workers']} push workers in one deliver group on the durable's deliver subject, "
              f"msg-ids with retries, {d.get('seconds', '?')} s) on ORDERS; a third into the run the push durable moves to ORDERS_V2 (strategy source, "
              "drain): the new durable keeps the deliver subject and group, so the workers follow nothing.", "",
              "| measure | median (min–max) |", "|---|---|",
              f"| published per run | {col(lambda r: r['published'])} |",
              f"| lost / duplicated / pending on B | {sum(r['lost'] for r in runs)} / {sum(r['duplicated'] for r in runs)} / {sum(r.get('pending_on_b', 0) for r in runs)} (all runs) |",
              f"| consumer gap of the handoff (push workers) | {col(lambda r: r['handoff_gap_ms'], ' ms')} |",
              f"| max consumer gap | {col(lambda r: r['max_consumer_gap_ms'], ' ms')} |",
              f"| max publisher stall | {col(lambda r: r['max_publish_stall_ms'], ' ms')} |",
              f"| whole cut-over | {col(lambda r: r['cutover_ms'], ' ms')} |",
              f"| runs | {len(runs)} |", ""]


def cluster_section(d, procs, lines):
    runs = d["runs"]
    col = lambda f, u="", dg=None: mmm([f(r) for r in runs], u, dg)
    n = d.get("cluster_nodes", 3)
    lines += [f"## Live cut-over on a {n}-node cluster (R{n})", "",
              f"The live workload ({num(d['rate'])} msg/s, {d['workers']} pull workers following their route, batches of 32, "
              f"{d.get('processing_us', '?')} µs of processing, msg-ids with retries, {d.get('seconds', '?')} s) on ORDERS with {n} replicas, "
              f"on a fresh {n}-node loopback cluster per run (the client connected to every node); a third into the run the durable moves to "
              f"ORDERS_V2 (strategy source, drain; B gets A's {n} replicas). All {n} servers share the machine's cores.", ""]
    single = []
    if procs:
        single = [r for r in procs["runs"] if r.get("procedure") == "drain" and r.get("rate") == d["rate"] and not r.get("error")]
    head = "| measure | cluster: median (min–max) |"
    if single:
        head += " one server, same rate (procedures' drain row) |"
    lines += [head, "|---|---|" + ("---|" if single else "")]

    def row(name, f, key, u="", dg=None):
        line = f"| {name} | {col(f, u, dg)} |"
        if single:
            line += f" {mmm([r[key] for r in single], u, dg) if key else '–'} |"
        lines.append(line)
    row("published per run", lambda r: r["published"], "published")
    row("lost", lambda r: r["lost"], "lost")
    row("duplicated", lambda r: r["duplicated"], "duplicated")
    row("pending on B (late, not lost)", lambda r: r.get("pending_on_b", 0), "pending")
    row("max publisher stall", lambda r: r["max_publish_stall_ms"], "max_publish_stall_ms", " ms")
    row("max consumer gap", lambda r: r["max_consumer_gap_ms"], "max_consumer_gap_ms", " ms")
    row("consumer gap of the handoff", lambda r: r["handoff_gap_ms"], None, " ms")
    row("total time of the cut-over", lambda r: r["cutover_ms"], "procedure_ms", " ms")
    lines += [f"| runs | {len(runs)} |" + (f" {len(single)} |" if single else ""), ""]
    if single:
        lines += ["The one-server column is the procedures' drain row at the same rate, same run of scripts/bench.sh: its workload is "
                  f"{procs['workers']} workers with {procs['processing_us']} µs of processing and ack_wait {procs['ack_wait_s']} s "
                  f"(this one's: {d['workers']} workers, {d.get('processing_us', '?')} µs, ack_wait 30 s).", ""]


def kv_section(d, lines):
    runs = d["runs"]
    ok = [r for r in runs if not r.get("error")]
    col = lambda k, u="", dg=None: mmm([r[k] for r in ok], u, dg)
    lines += ["## KV bucket in place under write load", "",
              f"A bucket of {num(d['keys'])} keys; a writer puts {num(d['rate'])} values/s to random keys (a put that fails is retried "
              "with the same value for up to 5 s: failed means it never landed) and a reader gets random keys, while the bucket's stream "
              "changes to storage=memory, history=64 under its own name (`nats-cutover kv CFG --set ...`: two mirror hops).", ""]
    for r in runs:
        if r.get("error"):
            lines += [f"**failed**: {r['error']}", ""]
    if ok:
        lines += ["| measure | median (min–max) |", "|---|---|",
                  f"| whole change | {col('change_ms', ' ms')} |",
                  f"| writes / failed | {sum(r['writes'] for r in ok)} / {sum(r['failed_writes'] for r in ok)} (all runs) |",
                  f"| longest write (first attempt to ack) | {col('longest_write_ms', ' ms')} |",
                  f"| reads / found no value | {sum(r['reads'] for r in ok)} / {sum(r['reads_not_found'] for r in ok)} (all runs) |",
                  f"| storage after | {', '.join(sorted({str(r['storage_after']) for r in ok}))} |",
                  f"| runs | {len(ok)} |", ""]


def header(m, steps, lines):
    mem = m["mem_kib"] / 1024 / 1024
    l1 = float(m["load_before"].split()[0])
    total = sum(int(x[1]) for x in steps)
    lines += ["# Benchmarks", "",
              "<!-- Generated by scripts/bench.sh (scripts/bench-report.py) from target/bench/*.json; edit those, not this part. -->", "",
              f"Measured {m['date']} by `scripts/bench.sh` at commit {m['commit']}: {m['cores']} cores ({m['cpu']}), {mem:.0f} GiB, "
              f"{m['kernel']}; {m['server']} on loopback (a fresh server per run, started by the benchmarks through cutover-testkit); "
              f"release build, {m['rustc']}. Benchmarks are never run by the test suite.", "",
              "The client matrix (applications written on nats-py, nats.js and nats.go through every change: lost, twice, "
              "longest gap, whole again) is [docs/clients.md](clients.md), written by `scripts/client-matrix.sh`, which "
              "`scripts/bench.sh` runs after these (`BENCH_NO_MATRIX=1` leaves it out).", "",
              f"All the steps below took {total // 60} min {total % 60} s (build included; issue 14's budget: 30 min on a fresh machine). Load average (1, 5, 15 min) at the start of the last scripts/bench.sh invocation: {m['load_before']}; at its end: {m['load_after']}."]
    loads = [float(x[3]) for x in steps if len(x) > 3]
    if any(len(x) < 4 for x in steps if x[0] != "build"):
        lines += ["", "The load average was not recorded for every step of this run (an older scripts/bench.sh): treat those steps as measured on a shared machine."]
    # The benchmarks load the cores themselves (a server, the publisher and
    # the workers): on 2 cores a step ends at a load of 1.4-3.2 with nothing
    # else running. Above that, or with a load before the run, other work
    # shared the machine.
    cores = int(m["cores"])
    if l1 > 0.5 * cores or float(m["load_after"].split()[0]) > 1.5 * cores or any(v > 1.75 * cores for v in loads):
        lines += ["", "**Not a quiet machine**: other work (compilations, test suites) shared the cores during this run, so rates are low and "
                  "stalls and gaps high, pessimistic. `scripts/bench.sh` regenerates every number here on a quiet machine."]
    elif loads:
        lines += ["", f"No sign of other work: the load at each step's end ({min(loads):.2f}-{max(loads):.2f}) is what the benchmarks make themselves "
                  "(the server, the publisher and the workers share the cores)."]
    lines += ["", "Exact commands (each step's time):", "", "```sh", "scripts/bench.sh    # runs all of these, then scripts/bench-report.py"]
    order = ["build", "procedures", "translate", "verify", "many", "sourcing", "push", "cluster", "in_place", "kv"]
    for x in sorted(steps, key=lambda x: order.index(x[0]) if x[0] in order else 99):
        load = f", load {x[3]} at its end" if len(x) > 3 else ""
        if x[0] == "build" and int(x[1]) < 10:
            load += " (nothing to rebuild: a fresh checkout adds a cold release build)"
        lines.append(f"{x[2]}    # {x[0]}: {x[1]} s{load}")
    lines += ["```", ""]


def main():
    src, md, svg_dir = sys.argv[1:4]
    os.makedirs(svg_dir, exist_ok=True)
    m = load(src, "machine")
    steps = []
    if os.path.exists(os.path.join(src, "steps.tsv")):
        with open(os.path.join(src, "steps.tsv")) as f:
            steps = [l.rstrip("\n").split("\t") for l in f if l.strip()]
    lines = []
    header(m, steps, lines)
    parts = [("procedures", lambda x: procedures_section(x, svg_dir, lines)), ("translate", lambda x: translate_section(x, lines)),
             ("verify", lambda x: verify_section(x, lines)), ("many", lambda x: many_section(x, lines)),
             ("sourcing", lambda x: sourcing_section(x, svg_dir, lines)), ("push", lambda x: push_section(x, lines)),
             ("cluster", lambda x: cluster_section(x, load(src, "procedures"), lines)),
             ("in_place", lambda x: in_place_section(x, lines)), ("kv", lambda x: kv_section(x, lines))]
    for name, f in parts:
        d = load(src, name)
        if d is None:
            lines += [f"## {name}", "", f"Not measured in this run (no target/bench/{name}.json).", ""]
        else:
            f(d)
    kept = ""
    if os.path.exists(md):
        with open(md) as f:
            text = f.read()
        if MARKER in text:
            kept = text.split(MARKER, 1)[1]
    with open(md, "w") as f:
        f.write("\n".join(lines) + "\n" + MARKER + kept)


if __name__ == "__main__":
    main()
