package main

import (
	"encoding/json"
	"errors"
	"flag"
	"sync"
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
//
// --follow-route (pull): follows the route record route.S.C in KV bucket
// CUTOVER as docs/protocol.md describes for route followers: a record names
// the stream/consumer to fetch from; a deleted or purged entry is no record
// (R1: back home); entries are applied in revision order only (R8). It reads
// the key with js.GetLastMsg before the first fetch (kv.Get hides a delete
// marker and its revision: R1's nats.go note), then watches it (1.22's
// Updates() sends a nil marker once the initial values are in: skipped; a
// closed channel is watched again). Between batches it rebinds where the
// record says.
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
	follow := fs.Bool("follow-route", false, "pull: follow route.S.C in KV bucket CUTOVER")
	fs.Parse(argv)
	if *follow && *mode != "pull" {
		fatal("--follow-route is for --mode pull")
	}
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
	rt := &follower{home: [2]string{*stream, *consumer}, target: [2]string{*stream, *consumer}}
	if *follow {
		rt.read(js)
		go rt.watch(js, stop, &rl)
	}
	bound := rt.get()
	var sub *nats.Subscription
	for sub == nil && !stopped(stop) {
		if *mode == "pull" {
			bound = rt.get()
			sub, err = js.PullSubscribe("", bound[1], nats.Bind(bound[0], bound[1]))
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
			if t := rt.get(); *follow && t != bound {
				next, err := js.PullSubscribe("", t[1], nats.Bind(t[0], t[1]))
				if err != nil {
					rl.logf("rebind", "binding %s/%s failed, retrying: %v", t[0], t[1], err)
					time.Sleep(100 * time.Millisecond)
					continue
				}
				sub.Unsubscribe()
				sub, bound = next, t
				logf("following the route: fetching from %s/%s", t[0], t[1])
			}
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
	final := rt.get()
	o.line(map[string]interface{}{"done": true, "handled": handled, "acked": acked, "ack_failed": ackFailed, "route": []string{final[0], final[1]}})
	logf("done: handled=%d acked=%d ack_failed=%d", handled, acked, ackFailed)
	nc.Close()
}

// follower is the binding the route record asks for (home without one).
type follower struct {
	mu     sync.Mutex
	home   [2]string
	target [2]string
	rev    uint64
}

func (r *follower) get() [2]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.target
}

func (r *follower) key() string { return "route." + r.home[0] + "." + r.home[1] }

// apply takes an entry newer than the last applied (R8): a put names the
// binding, a delete or purge is no record (R1).
func (r *follower) apply(rev uint64, deleted bool, value []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rev <= r.rev {
		return
	}
	r.rev = rev
	next := r.home
	if !deleted {
		var rec struct {
			Stream   string `json:"stream"`
			Consumer string `json:"consumer"`
		}
		if err := json.Unmarshal(value, &rec); err != nil || rec.Stream == "" || rec.Consumer == "" {
			logf("ignoring a bad route record (rev %d): %v", rev, err)
			return
		}
		next = [2]string{rec.Stream, rec.Consumer}
	}
	if next != r.target {
		logf("route rev %d: %s/%s -> %s/%s", rev, r.target[0], r.target[1], next[0], next[1])
		r.target = next
	}
}

// read applies the key's latest entry, read from the bucket stream's leader.
func (r *follower) read(js nats.JetStreamContext) {
	m, err := js.GetLastMsg("KV_CUTOVER", "$KV.CUTOVER."+r.key())
	if err != nil {
		return // no bucket or no key: no record
	}
	op := m.Header.Get("KV-Operation")
	r.apply(m.Sequence, op == "DEL" || op == "PURGE", m.Data)
}

func (r *follower) watch(js nats.JetStreamContext, stop chan struct{}, rl *limited) {
	for !stopped(stop) {
		kv, err := js.KeyValue("CUTOVER")
		var w nats.KeyWatcher
		if err == nil {
			w, err = kv.Watch(r.key())
		}
		if err != nil {
			rl.logf("watch", "route watch: %v; again in 200 ms", err)
			time.Sleep(200 * time.Millisecond)
			continue
		}
		r.read(js) // a watch set up again may have missed changes
	loop:
		for {
			select {
			case <-stop:
				w.Stop()
				return
			case e, ok := <-w.Updates():
				if !ok {
					break loop
				}
				if e == nil {
					continue // the initial values are in
				}
				op := e.Operation()
				r.apply(e.Revision(), op == nats.KeyValueDelete || op == nats.KeyValuePurge, e.Value())
			}
		}
	}
}
