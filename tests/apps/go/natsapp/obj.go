package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// obj-get: js.ObjectStore(B).GetBytes("o{k}") round and round, each compared with
// what kv_app.py obj-put wrote (a 4096-byte block, byte i = (k*31+i) % 251,
// repeated to --size bytes).
func objGet(argv []string) {
	fs := flag.NewFlagSet("obj-get", flag.ExitOnError)
	server := fs.String("server", "", "NATS URL")
	bucket := fs.String("bucket", "", "object store")
	outPath := fs.String("out", "", "JSON lines output")
	objects := fs.Int("objects", 3, "objects o0 .. o{objects-1}")
	size := fs.Int("size", 8<<20, "bytes per object")
	fs.Parse(argv)
	if *server == "" || *bucket == "" || *outPath == "" {
		fatal("--server, --bucket, --out are required")
	}
	o := openOut(*outPath)
	stop := stopChan()
	nc := connect(*server, "cutover-test-obj-get-go")
	js, _ := nc.JetStream()
	want := make([][]byte, *objects)
	for k := range want {
		b := make([]byte, *size)
		for i := range b {
			b[i] = byte((k*31 + i%4096) % 251)
		}
		want[k] = b
	}
	var rl limited
	var obs nats.ObjectStore
	for obs == nil && !stopped(stop) {
		var err error
		if obs, err = js.ObjectStore(*bucket); err != nil {
			obs = nil
			rl.logf("open", "object store %s: %v; retrying", *bucket, err)
			time.Sleep(200 * time.Millisecond)
		}
	}
	c := map[string]int{"reads": 0, "intact": 0, "wrong": 0, "not_found": 0, "errors": 0}
	var longest time.Duration
	var badSince *time.Time
	if obs != nil {
		ready()
		for j := 0; !stopped(stop); j++ {
			k := j % *objects
			ok := false
			data, err := obs.GetBytes(fmt.Sprintf("o%d", k))
			switch {
			case errors.Is(err, nats.ErrObjectNotFound):
				c["not_found"]++
			case err != nil:
				c["errors"]++
				rl.logf("get", "get o%d failed: %v", k, err)
			case bytes.Equal(data, want[k]):
				c["intact"]++
				ok = true
			default:
				c["wrong"]++
				rl.logf("wrong", "o%d: %d bytes, not what was put", k, len(data))
			}
			c["reads"]++
			now := time.Now()
			if ok {
				if badSince != nil && now.Sub(*badSince) > longest {
					longest = now.Sub(*badSince)
				}
				badSince = nil
			} else if badSince == nil {
				badSince = &now
			}
			time.Sleep(time.Millisecond)
		}
	}
	rec := map[string]interface{}{"done": true, "longest_bad_ms": ms(longest)}
	for k, v := range c {
		rec[k] = v
	}
	o.line(rec)
	nc.Close()
}
