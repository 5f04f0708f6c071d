#!/usr/bin/env python3
"""A JetStream publisher written with plain nats-py, standing for a user's app.

It publishes --count messages at about --rate msg/s. Message i (0-based) has the
payload str(i), the header `Nats-Msg-Id: {prefix}-{i}`, and goes to --subject, or
with --subjects-count K > 1 to `{subject}.{i % K}`. A message that is not acked
(no responders, ack timeout, a retryable JetStream error) is sent again, the same
message with the same msg-id, with a backoff of 2 ms doubling up to 50 ms, until
it is acked or --retry-horizon seconds have passed since its first attempt. The
next message is not sent before the current one is acked or given up, as an app
that needs ordering would do.

Output (--out), JSON lines, one per line, line-buffered:
  {"id", "stream", "seq", "duplicate", "attempts", "stall_ms", "subject", "t_ms"}  acked
  {"id", "failed": true, "attempts", "stall_ms", "error", "subject", "t_ms"}       given up
(t_ms: when the line was written, ms since the epoch). --no-retry: each message is
published once, as nats-py's publish does by itself; a failure is recorded.
  {"done": true, "acked", "failed", "max_stall_ms", "stopped", "abandoned",
   "sent", "elapsed_s"}                                                    last line
SIGTERM/SIGINT stop early (the attempt in flight completes first); the last line
is still written, with "stopped": true, and a message whose retries were cut
short by the stop counts in "abandoned" (neither acked nor failed).
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

# JetStream API error codes (err_code) that no retry can fix.
PERMANENT_ERR_CODES = {
    10054,  # message size exceeds maximum allowed
    10060,  # expected stream does not match
    10070,  # wrong last msg id
    10071,  # wrong last sequence
}

BACKOFF_START = 0.002
BACKOFF_CAP = 0.050


def log(*parts):
    print(time.strftime("%H:%M:%S"), "publisher:", *parts, file=sys.stderr, flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server", required=True, help="NATS URL, e.g. nats://127.0.0.1:4222")
    p.add_argument("--subject", required=True, help="subject, or subject prefix with --subjects-count > 1")
    p.add_argument("--subjects-count", type=int, default=1, help="K: message i goes to SUBJECT.{i %% K} when K > 1")
    p.add_argument("--count", type=int, required=True, help="N messages to publish")
    p.add_argument("--rate", type=float, required=True, help="about R msg/s (0 = as fast as acks allow)")
    p.add_argument("--id-prefix", required=True, help="msg-id of message i is {P}-{i}")
    p.add_argument("--out", required=True, help="JSON lines output file")
    p.add_argument("--ack-timeout", type=float, default=0.5, help="seconds to wait for one publish ack")
    p.add_argument("--retry-horizon", type=float, default=120.0, help="seconds after the first attempt to give up")
    p.add_argument("--size", type=int, default=0, help="pad each payload with spaces to this many bytes (0: str(i) as it is)")
    p.add_argument("--start-index", type=int, default=0, help="index of the first message (default 0)")
    p.add_argument("--no-msg-id", action="store_true", help="publish without Nats-Msg-Id, the payload {P}-{i}: only 'no responders' (nothing stored) is retried, a timeout is recorded as failed (it may have been stored)")
    p.add_argument("--no-retry", action="store_true", help="publish each message once (nats-py's own publish, no retry); a failure is recorded and the next message follows")
    return p.parse_args(argv)


def retryable(err):
    """Whether a publish error may go away by sending the same message again."""
    if isinstance(err, nats.js.errors.APIError):
        return err.err_code not in PERMANENT_ERR_CODES
    # NoStreamResponseError (no responders), nats TimeoutError, connection trouble
    # while reconnecting (ConnectionClosedError, OutboundBufferLimitError, ...).
    return True


async def connect(server, stop):
    async def error_cb(e):
        log("connection error:", repr(e))

    async def disconnected_cb():
        if not stop.is_set():
            log("disconnected")

    async def reconnected_cb():
        log("reconnected")

    deadline = time.monotonic() + 30
    while True:
        try:
            return await nats.connect(
                server,
                name="cutover-test-publisher",
                error_cb=error_cb,
                disconnected_cb=disconnected_cb,
                reconnected_cb=reconnected_cb,
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.2,
                connect_timeout=2,
            )
        except Exception as e:  # noqa: BLE001 - any failure to connect is retried a while
            if time.monotonic() > deadline:
                raise
            log("connect failed, retrying:", repr(e))
            await asyncio.sleep(0.2)


async def run(args):
    stop = asyncio.Event()
    closing = asyncio.Event()  # set once we close the connection ourselves
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    out = open(args.out, "a", buffering=1, encoding="utf-8")  # line-buffered: flushed per line
    nc = await connect(args.server, closing)
    js = nc.jetstream(timeout=args.ack_timeout)

    acked = failed = abandoned = sent = 0
    max_stall_ms = 0.0
    interval = 1.0 / args.rate if args.rate > 0 else 0.0
    t_start = time.monotonic()
    next_at = t_start
    last_err_kind = None

    try:
        for i in range(args.start_index, args.start_index + args.count):
            if stop.is_set():
                break
            # Pace: aim at t_start + k*interval, but never burst more than 1 s of backlog
            # after a stall.
            if interval:
                now = time.monotonic()
                next_at = max(next_at, now - 1.0)
                if next_at > now:
                    try:
                        await asyncio.wait_for(stop.wait(), next_at - now)
                        break
                    except asyncio.TimeoutError:
                        pass
                next_at += interval

            subject = f"{args.subject}.{i % args.subjects_count}" if args.subjects_count > 1 else args.subject
            msg_id = f"{args.id_prefix}-{i}"
            payload = (msg_id if args.no_msg_id else str(i)).encode().ljust(args.size, b" ")
            headers = None if args.no_msg_id else {"Nats-Msg-Id": msg_id}
            first = time.monotonic()
            attempts = 0
            backoff = BACKOFF_START
            sent += 1
            while True:
                attempts += 1
                try:
                    ack = await js.publish(
                        subject, payload, timeout=args.ack_timeout, headers=headers
                    )
                except Exception as e:  # noqa: BLE001 - classified below
                    kind = type(e).__name__
                    if kind != last_err_kind:
                        log(f"publish {msg_id} attempt {attempts} failed: {e!r}")
                        last_err_kind = kind
                    elapsed = time.monotonic() - first
                    no_resp = isinstance(e, (nats.js.errors.NoStreamResponseError, nats.errors.NoRespondersError))
                    exact = no_resp or not args.no_msg_id
                    if args.no_retry or not exact or not retryable(e) or elapsed >= args.retry_horizon:
                        stall_ms = elapsed * 1000.0
                        failed += 1
                        rec = {
                            "id": msg_id,
                            "failed": True,
                            "attempts": attempts,
                            "stall_ms": round(stall_ms, 3),
                            "error": repr(e),
                            "subject": subject,
                            "t_ms": int(time.time() * 1000),
                        }
                        out.write(json.dumps(rec) + "\n")
                        log(f"gave up on {msg_id} after {attempts} attempts: {e!r}")
                        break
                    if stop.is_set():
                        abandoned += 1
                        log(f"stopped while retrying {msg_id} ({attempts} attempts)")
                        break
                    await asyncio.sleep(min(backoff, max(0.0, args.retry_horizon - elapsed)))
                    backoff = min(backoff * 2, BACKOFF_CAP)
                    continue
                if last_err_kind is not None:
                    log(f"publish {msg_id} acked after {attempts} attempts")
                    last_err_kind = None
                stall_ms = (time.monotonic() - first) * 1000.0
                max_stall_ms = max(max_stall_ms, stall_ms)
                acked += 1
                rec = {
                    "id": msg_id,
                    "stream": ack.stream,
                    "seq": ack.seq,
                    "duplicate": bool(ack.duplicate),
                    "attempts": attempts,
                    "stall_ms": round(stall_ms, 3),
                    "subject": subject,
                    "t_ms": int(time.time() * 1000),
                }
                out.write(json.dumps(rec) + "\n")
                break
    finally:
        done = {
            "done": True,
            "acked": acked,
            "failed": failed,
            "max_stall_ms": round(max_stall_ms, 3),
            "stopped": stop.is_set(),
            "abandoned": abandoned,
            "sent": sent,
            "elapsed_s": round(time.monotonic() - t_start, 3),
        }
        out.write(json.dumps(done) + "\n")
        out.flush()
        out.close()
        closing.set()
        try:
            await asyncio.wait_for(nc.close(), 5)
        except Exception as e:  # noqa: BLE001
            log("close:", repr(e))
    log(f"done: acked={acked} failed={failed} abandoned={abandoned} max_stall_ms={max_stall_ms:.1f}")
    return 0


def main(argv=None):
    args = parse_args(argv)
    if args.count < 0 or args.subjects_count < 1:
        print("--count must be >= 0 and --subjects-count >= 1", file=sys.stderr)
        return 2
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
