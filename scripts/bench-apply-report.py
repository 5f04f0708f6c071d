#!/usr/bin/env python3
"""Writes the `apply` section of docs/benchmarks.md (between its bench-apply
markers, appended below everything if absent) from target/bench/apply.json.
Standard library only; scripts/bench-apply.sh runs it. Every number it
prints comes from those files.
Usage: scripts/bench-apply-report.py APPLY_JSON MACHINE_JSON DOCS_MD"""
import json
import sys

BEGIN = "<!-- scripts/bench-apply.sh writes from here -->"
END = "<!-- scripts/bench-apply.sh writes up to here -->"


def num(x, digits=0):
    return "–" if x is None else f"{x:,.{digits}f}"


def main():
    data = json.load(open(sys.argv[1]))
    m = json.load(open(sys.argv[2]))
    doc = sys.argv[3]
    d = data
    r0 = d["runs"][0] if d["runs"] else {}
    out = [BEGIN, "", "## apply: a fleet changed live (issue 26)", ""]
    out.append(
        f"`scripts/bench-apply.sh`: a fleet of streams and KV buckets (sizes per row; the issue's "
        f"is 200: 150 streams, 50 buckets, 40 live changes), the live changes storage file to memory "
        f"(streams and buckets in proportion), half the others an update the server takes (max_age; "
        f"a bucket's history), half unchanged; {d['msgs_per_asset']} messages an asset, every "
        f"asset's duplicate window {d['window_s']} s. The loaded assets are live-change streams with "
        f"a live workload each (publisher with msg-ids and retries at {d['rate_per_loaded']} msg/s, "
        f"one pull worker following its route). The release binary runs "
        f"`apply DIR --yes --parallel P` under `/usr/bin/time -v`; fresh servers every run "
        f"(nats-server {d['server']}; the cluster: 3 nodes on loopback, every asset R3)."
    )
    out.append("")
    if m.get("note"):
        out += [f"**{m['note']}**", ""]
    out.append(
        f"Measured {m['date']} on {m['cores']} cores ({m['cpu']}), commit {m['commit']}, "
        f"one run per row, {m['seconds']} s in all; 1-minute load average before {m['load_before']}, "
        f"after {m['load_after']}."
    )
    out.append("")
    out.append(
        "| nodes | fleet: streams + KV (live, loaded) | `--parallel` | apply took | longest publish, worst asset | longest publish, "
        "median of the loaded assets | each live change took (median / max) | lost / twice | "
        "publish failures | runner peak RSS | outcomes | dry run afterwards |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in d["runs"]:
        outcomes = ", ".join(f"{v} {k}" for k, v in sorted(r["outcomes"].items()))
        if r["exit_code"] != 0:
            outcomes += f" (exit {r['exit_code']}: {' / '.join(r['error'] or [])})"
        if r["wrong_outcomes"]:
            outcomes += f"; unexpected: {', '.join(r['wrong_outcomes'][:5])}"
        rss = r.get("peak_rss_kib")
        after = r["dry_run_after_exit_code"]
        out.append(
            f"| {r['nodes']} (R{r['replicas']}) | {r['streams']} + {r['kv']} ({r['live']}, {r['loaded']}) | {r['parallel']} | {num(r['apply_s'], 1)} s | "
            f"{num(r['worst_stall_ms'])} ms | {num(r['median_stall_ms'])} ms | "
            f"{num(r['live_change_ms_median'])} / {num(r['live_change_ms_max'])} ms | "
            f"{r['lost']} / {r['twice']} | {r['publish_failures']} | "
            f"{'–' if rss is None else num(rss / 1024, 1) + ' MiB'} | {outcomes} | "
            f"{'all unchanged (exit 0)' if after == 0 else f'exit {after}'} |"
        )
    out.append("")
    out.append(
        "\"Longest publish\" is a loaded asset's longest wait from a publish to its "
        "acknowledgement (retries included) over the whole run; the apply's own time "
        "includes judging every asset (each live change's in-place plan) before the first write."
    )
    out += ["", END]
    section = "\n".join(out) + "\n"
    text = open(doc).read()
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1].lstrip("\n")
        text = head + section + ("\n" + tail if tail else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    open(doc, "w").write(text)


if __name__ == "__main__":
    main()
