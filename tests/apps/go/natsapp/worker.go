package main

import (
	"errors"
	"flag"
	"time"

	"github.com/nats-io/nats.go"
)

// worker binds to an EXISTING durable by name (nats.Bind; it never creates one):
// pull, js.PullSubscribe("", C, nats.Bind(S, C)) and Fetch(batch, MaxWait) in a
// loop; push, js.QueueSubscribeSync("", group, nats.Bind(S, C), nats.ManualAck())
// on the durable's deliver subject in its deliver group, and NextMsg. While the
// durable does not exist it retries every 0.2 s. Each message is double-acked with
// AckSync (a failed one, timeout or no responders, is asked again for up to 5 s:
// nats.go marks a message acked only once an ack succeeded) and then one line
// is written.
func worker(argv []string) {
	fs := flag.NewFlagSet("worker", flag.ExitOnError)
	server := fs.String("server", "", "NATS URL")
	stream := fs.String("stream", "", "stream")
	consumer := fs.String("consumer", "", "name of an existing durable")
	mode := fs.String("mode", "", "pull|push")
	outPath := fs.String("out", "", "JSON lines output")
	batch := fs.Int("batch", 32, "pull: messages per fetch")
	expires := fs.Float64("expires", 0.3, "pull: seconds one fetch waits; push: one NextMsg")
	ackTimeout := fs.Float64("ack-timeout", 1.0, "seconds to wait for the server's ack reply")
	group := fs.String("group", "", "push: queue group (default: the durable's deliver group)")
	fs.Parse(argv)
	if *server == "" || *stream == "" || *consumer == "" || (*mode != "pull" && *mode != "push") || *outPath == "" {
		fatal("--server, --stream, --consumer, --mode pull|push, --out are required")
	}
	o := openOut(*outPath)
	stop := stopChan()
	nc := connect(*server, "cutover-test-worker-go")
	js, err := nc.JetStream()
	if err != nil {
		fatal("jetstream: %v", err)
	}
	var rl limited
	var sub *nats.Subscription
	for sub == nil && !stopped(stop) {
		if *mode == "pull" {
			sub, err = js.PullSubscribe("", *consumer, nats.Bind(*stream, *consumer))
		} else {
			g := *group
			if g == "" {
				var ci *nats.ConsumerInfo
				if ci, err = js.ConsumerInfo(*stream, *consumer); err == nil {
					g = ci.Config.DeliverGroup
				}
			}
			if err == nil {
				sub, err = js.QueueSubscribeSync("", g, nats.Bind(*stream, *consumer), nats.ManualAck())
			}
		}
		if err != nil {
			sub = nil
			rl.logf("bind", "binding %s/%s failed, retrying: %v", *stream, *consumer, err)
			time.Sleep(200 * time.Millisecond)
		}
	}
	handled, acked, ackFailed := 0, 0, 0
	wait := time.Duration(*ackTimeout * float64(time.Second))
	handle := func(m *nats.Msg) {
		rec := map[string]interface{}{"id": nil, "stream": nil, "seq": nil, "source": nil, "delivered": nil,
			"consumer": nil, "subject": m.Subject, "t_ms": nowMs()}
		if v := m.Header.Get("Nats-Msg-Id"); v != "" {
			rec["id"] = v
		}
		if v := m.Header.Get("Nats-Stream-Source"); v != "" {
			rec["source"] = v
		}
		if md, err := m.Metadata(); err == nil {
			rec["stream"], rec["seq"], rec["delivered"], rec["consumer"] = md.Stream, md.Sequence.Stream, md.NumDelivered, md.Consumer
		}
		var ackErr error
		first := time.Now()
		backoff := 50 * time.Millisecond
		for {
			ackErr = m.AckSync(nats.AckWait(wait))
			if ackErr == nil || errors.Is(ackErr, nats.ErrMsgAlreadyAckd) || time.Since(first) > 5*time.Second {
				break
			}
			time.Sleep(backoff)
			if backoff < 500*time.Millisecond {
				backoff *= 2
			}
		}
		handled++
		rec["acked"] = ackErr == nil
		rec["ack_error"] = nil
		if ackErr == nil {
			acked++
		} else {
			ackFailed++
			rec["ack_error"] = ackErr.Error()
			rl.logf("ack", "ack of %v#%v (%v) failed: %v", rec["stream"], rec["seq"], rec["id"], ackErr)
		}
		o.line(rec)
	}
	if sub != nil {
		nc.Flush()
		ready()
		logf("bound to %s/%s (%s)", *stream, *consumer, *mode)
		d := time.Duration(*expires * float64(time.Second))
		errs := 0
		for !stopped(stop) {
			var msgs []*nats.Msg
			if *mode == "pull" {
				msgs, err = sub.Fetch(*batch, nats.MaxWait(d))
			} else {
				var m *nats.Msg
				if m, err = sub.NextMsg(d); err == nil {
					msgs = []*nats.Msg{m}
				}
			}
			if err != nil && !errors.Is(err, nats.ErrTimeout) {
				errs++
				rl.logf("fetch", "fetch from %s/%s failed (%dx): %v", *stream, *consumer, errs, err)
				d := time.Duration(errs) * 50 * time.Millisecond
				if d > 500*time.Millisecond {
					d = 500 * time.Millisecond
				}
				time.Sleep(d)
				continue
			}
			if errs > 0 && len(msgs) > 0 {
				logf("%s/%s delivering again", *stream, *consumer)
				errs = 0
			}
			for _, m := range msgs {
				handle(m)
			}
		}
		if *mode == "push" {
			sub.Unsubscribe() // what is already delivered is still handled below
			for {
				m, err := sub.NextMsg(10 * time.Millisecond)
				if err != nil {
					break
				}
				handle(m)
			}
		}
	}
	o.line(map[string]interface{}{"done": true, "handled": handled, "acked": acked, "ack_failed": ackFailed, "route": []string{*stream, *consumer}})
	logf("done: handled=%d acked=%d ack_failed=%d", handled, acked, ackFailed)
	nc.Close()
}
