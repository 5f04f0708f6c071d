package main

import (
	"errors"
	"flag"
	"time"

	"github.com/nats-io/nats.go"
)

// ordered: an ordered consumer, js.SubscribeSync("", nats.OrderedConsumer(),
// nats.BindStream(S), nats.DeliverNew()|DeliverAll()): the client creates and
// re-creates its ephemeral push consumer itself. One line per message.
func ordered(argv []string) {
	fs := flag.NewFlagSet("ordered", flag.ExitOnError)
	server := fs.String("server", "", "NATS URL")
	stream := fs.String("stream", "", "stream")
	outPath := fs.String("out", "", "JSON lines output")
	deliver := fs.String("deliver", "new", "new|all")
	fs.Parse(argv)
	if *server == "" || *stream == "" || *outPath == "" {
		fatal("--server, --stream, --out are required")
	}
	o := openOut(*outPath)
	stop := stopChan()
	nc := connect(*server, "cutover-test-ordered-go")
	js, err := nc.JetStream()
	if err != nil {
		fatal("jetstream: %v", err)
	}
	pol := nats.DeliverNew()
	if *deliver == "all" {
		pol = nats.DeliverAll()
	}
	var rl limited
	var sub *nats.Subscription
	for sub == nil && !stopped(stop) {
		if sub, err = js.SubscribeSync("", nats.OrderedConsumer(), nats.BindStream(*stream), pol); err != nil {
			sub = nil
			rl.logf("sub", "ordered consumer on %s failed, retrying: %v", *stream, err)
			time.Sleep(200 * time.Millisecond)
		}
	}
	handled := 0
	if sub != nil {
		nc.Flush()
		ready()
		for !stopped(stop) {
			m, err := sub.NextMsg(200 * time.Millisecond)
			if err != nil {
				if !errors.Is(err, nats.ErrTimeout) {
					rl.logf("next", "next: %v", err)
					time.Sleep(50 * time.Millisecond)
				}
				continue
			}
			handled++
			rec := map[string]interface{}{"id": nil, "stream": nil, "seq": nil, "subject": m.Subject, "t_ms": nowMs()}
			if v := m.Header.Get("Nats-Msg-Id"); v != "" {
				rec["id"] = v
			}
			if md, err := m.Metadata(); err == nil {
				rec["stream"], rec["seq"] = md.Stream, md.Sequence.Stream
			}
			o.line(rec)
		}
	}
	o.line(map[string]interface{}{"done": true, "handled": handled, "ended": false})
	nc.Close()
}
