package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

func opName(op nats.KeyValueOp) string {
	switch op {
	case nats.KeyValuePut:
		return "PUT"
	case nats.KeyValueDelete:
		return "DEL"
	case nats.KeyValuePurge:
		return "PURGE"
	}
	return op.String()
}

func openKV(js nats.JetStreamContext, bucket string, stop chan struct{}) nats.KeyValue {
	var rl limited
	for !stopped(stop) {
		kv, err := js.KeyValue(bucket)
		if err == nil {
			return kv
		}
		rl.logf("open", "bucket %s: %v; retrying", bucket, err)
		time.Sleep(200 * time.Millisecond)
	}
	return nil
}

// kv-watch: js.KeyValue(B).Watch(key) and its Updates() channel (a nil entry marks
// the end of the initial values). One line per entry {"key","rev","op","value","t"}.
func kvWatch(argv []string) {
	fs := flag.NewFlagSet("kv-watch", flag.ExitOnError)
	server := fs.String("server", "", "NATS URL")
	bucket := fs.String("bucket", "", "bucket")
	outPath := fs.String("out", "", "JSON lines output")
	key := fs.String("key", ">", "keys to watch")
	fs.Parse(argv)
	if *server == "" || *bucket == "" || *outPath == "" {
		fatal("--server, --bucket, --out are required")
	}
	o := openOut(*outPath)
	stop := stopChan()
	nc := connect(*server, "cutover-test-kv-watch-go")
	js, _ := nc.JetStream()
	kv := openKV(js, *bucket, stop)
	entries, ended := 0, false
	if kv != nil {
		w, err := kv.Watch(*key)
		if err != nil {
			fatal("watch: %v", err)
		}
		ready()
	loop:
		for {
			select {
			case <-stop:
				break loop
			case e, ok := <-w.Updates():
				if !ok {
					ended = true
					break loop
				}
				if e == nil {
					continue
				}
				entries++
				o.line(map[string]interface{}{"key": e.Key(), "rev": e.Revision(), "op": opName(e.Operation()),
					"value": string(e.Value()), "t": float64(time.Now().UnixNano()) / 1e9})
			}
		}
		w.Stop()
	}
	o.line(map[string]interface{}{"done": true, "entries": entries, "ended": ended})
	nc.Close()
}

// kv-get: kv.Get("p.{n}") in a loop, 1 ms apart, expecting "p{n}".
func kvGet(argv []string) {
	fs := flag.NewFlagSet("kv-get", flag.ExitOnError)
	server := fs.String("server", "", "NATS URL")
	bucket := fs.String("bucket", "", "bucket")
	outPath := fs.String("out", "", "JSON lines output")
	keys := fs.Int("keys", 100, "keys p.0 .. p.{keys-1}")
	first := fs.Int("first", 0, "first key index")
	fs.Parse(argv)
	if *server == "" || *bucket == "" || *outPath == "" {
		fatal("--server, --bucket, --out are required")
	}
	o := openOut(*outPath)
	stop := stopChan()
	nc := connect(*server, "cutover-test-kv-get-go")
	js, _ := nc.JetStream()
	kv := openKV(js, *bucket, stop)
	c := map[string]int{"reads": 0, "right": 0, "wrong": 0, "not_found": 0, "errors": 0}
	var longest time.Duration
	var wrongSince *time.Time
	var rl limited
	if kv != nil {
		ready()
		for j := 0; !stopped(stop); j++ {
			n := *first + j%(*keys-*first)
			ok := false
			e, err := kv.Get(fmt.Sprintf("p.%d", n))
			switch {
			case errors.Is(err, nats.ErrKeyNotFound):
				c["not_found"]++
			case err != nil:
				c["errors"]++
				rl.logf("get", "get p.%d failed: %v", n, err)
			case bytes.Equal(e.Value(), []byte(fmt.Sprintf("p%d", n))):
				c["right"]++
				ok = true
			default:
				c["wrong"]++
			}
			c["reads"]++
			now := time.Now()
			if ok {
				if wrongSince != nil && now.Sub(*wrongSince) > longest {
					longest = now.Sub(*wrongSince)
				}
				wrongSince = nil
			} else if wrongSince == nil {
				wrongSince = &now
			}
			time.Sleep(time.Millisecond)
		}
	}
	rec := map[string]interface{}{"done": true, "longest_wrong_ms": ms(longest)}
	for k, v := range c {
		rec[k] = v
	}
	o.line(rec)
	nc.Close()
}
