#!/usr/bin/env python3
"""Writes the cross-system move section of docs/benchmarks.md (between its
bench-move markers, appended at the end if absent) from
target/bench/move_all.json. Standard library only; scripts/bench-move.sh
runs it. Every number it prints comes from those files.
Usage: scripts/bench-move-report.py MOVE_JSON MACHINE_JSON DOCS_MD"""
import json
import sys

BEGIN = "<!-- scripts/bench-move.sh writes from here -->"
END = "<!-- scripts/bench-move.sh writes up to here -->"


def num(x, digits=0):
    return "–" if x is None else f"{x:,.{digits}f}"


def main():
    d = json.load(open(sys.argv[1]))
    m = json.load(open(sys.argv[2]))
    doc = sys.argv[3]
    runs = d["runs"]
    r0 = runs[0] if runs else {}
    out = [BEGIN, "", "## A whole domain moved to a cluster under its names (issue 27)", ""]
    out.append(
        f"`scripts/bench-move.sh`: {r0.get('streams')} streams and {r0.get('kv')} KV buckets "
        f"({r0.get('msgs')} messages each) on a standalone server (a leaf "
        f"node with its own JetStream domain) moved to a 3-node loopback cluster (the hub's domain) "
        f"by `nats-cutover --server HUB --from-server LEAF apply DIR --repoint-publishers "
        f"--retry-horizon {r0.get('retry_horizon_s')}s --parallel P --yes`, one file per asset making "
        f"it R3 on the way; each asset a same-name move (two mirror hops: to `NAME_CUTOVER` on the "
        f"hub, then back to the name there). {r0.get('loaded')} streams carry a live workload each "
        f"(the library's publisher on the leaf, msg-ids and retries, {r0.get('rate')} msg/s; one pull "
        f"worker following its route on the hub). Fresh servers every run (nats-server {d['server']})."
    )
    out.append("")
    if m.get("note"):
        out += [f"**{m['note']}**", ""]
    out.append(
        f"Measured {m['date']} on {m['cores']} cores ({m['cpu']}), commit {m['commit']}, one run per "
        f"row, {m['seconds']} s in all; 1-minute load average before {m['load_before']}, after {m['load_after']}."
    )
    out.append("")
    out.append("| assets (loaded) | `--parallel` | apply took | longest publish, worst loaded stream | median of the loaded | each move took (median / max) | lost / twice | runner peak RSS | outcomes | dry run afterwards |")
    out.append("|---|---|---|---|---|---|---|---|---|---|")
    for r in runs:
        outcomes = ", ".join(f"{n} {k}" for k, n in sorted(r["outcomes"].items())) or "–"
        rss = "–" if r.get("peak_rss_kib") is None else f"{r['peak_rss_kib'] / 1024:.1f} MiB"
        dry = "all unchanged (exit 0)" if r.get("dry_run_after_exit_code") == 0 else f"exit {r.get('dry_run_after_exit_code')}"
        took = f"{r['apply_s']:.1f} s" + ("" if r["exit_code"] == 0 else f" (exit {r['exit_code']})")
        out.append(
            f"| {r['assets']} ({r['loaded']}) | {r['parallel']} | {took} | {num(r['worst_stall_ms'])} ms | "
            f"{num(r['median_stall_ms'])} ms | {num(r['move_ms_median'])} / {num(r['move_ms_max'])} ms | "
            f"{r['lost']} / {r['twice']} | {rss} | {outcomes} | {dry} |"
        )
    out.append("")
    out.append(
        "\"Longest publish\" is a loaded stream's longest wait from a publish to its acknowledgement "
        "(retries included) over the whole run, on the leaf (from hop 1's commit its publishes reach the "
        "hub through the leaf connection); each hop on the cluster waits one retry horizon before its "
        "commit, so a move takes at least two."
    )
    out += ["", END]
    text = open(doc).read()
    section = "\n".join(out)
    if BEGIN in text and END in text:
        a, b = text.index(BEGIN), text.index(END) + len(END)
        text = text[:a] + section + text[b:]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    open(doc, "w").write(text)


if __name__ == "__main__":
    main()
