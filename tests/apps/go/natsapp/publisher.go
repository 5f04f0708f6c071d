package main

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
)

// publisher: message i has payload strconv.Itoa(i), header Nats-Msg-Id P-i, subject
// S or S.{i % K}. js.PublishMsg with nats.MsgId and nats.AckWait. A failure (no
// responders, timeout, a JetStream API error other than a permanent one) is sent
// again with the same msg-id, backoff 2 ms doubling to 50 ms, until acked or
// --retry-horizon s after the first attempt. --no-retry: one call of PublishMsg
// with the client's defaults (nats.go 1.22 itself retries "no responders" twice,
// 250 ms apart, within the ack wait), the failure recorded, the next message sent.
func publisher(argv []string) {
	fs := flag.NewFlagSet("publisher", flag.ExitOnError)
	server := fs.String("server", "", "NATS URL")
	subject := fs.String("subject", "", "subject, or prefix with --subjects-count > 1")
	k := fs.Int("subjects-count", 1, "message i goes to SUBJECT.{i % K} when K > 1")
	count := fs.Int("count", 0, "messages to publish")
	rate := fs.Float64("rate", 0, "about R msg/s (0: as fast as acks come)")
	prefix := fs.String("id-prefix", "", "msg-id of message i is P-i")
	outPath := fs.String("out", "", "JSON lines output")
	ackTimeout := fs.Float64("ack-timeout", 0.5, "seconds to wait for one ack")
	horizon := fs.Float64("retry-horizon", 120, "seconds after the first attempt to give up")
	startIndex := fs.Int("start-index", 0, "index of the first message")
	noRetry := fs.Bool("no-retry", false, "publish each message once (the client's default publish)")
	fs.Parse(argv)
	if *server == "" || *subject == "" || *prefix == "" || *outPath == "" {
		fatal("--server, --subject, --id-prefix, --out are required")
	}
	o := openOut(*outPath)
	stop := stopChan()
	nc := connect(*server, "cutover-test-publisher-go")
	js, err := nc.JetStream()
	if err != nil {
		fatal("jetstream: %v", err)
	}
	ready()
	permanent := map[nats.ErrorCode]bool{10054: true, 10060: true, 10070: true, 10071: true}
	retryable := func(err error) bool {
		var apiErr *nats.APIError
		if errors.As(err, &apiErr) {
			return !permanent[apiErr.ErrorCode]
		}
		return true
	}
	wait := time.Duration(*ackTimeout * float64(time.Second))
	hz := time.Duration(*horizon * float64(time.Second))
	acked, failed, abandoned, sent := 0, 0, 0, 0
	var maxStall time.Duration
	t0 := time.Now()
	next := t0
	var interval time.Duration
	if *rate > 0 {
		interval = time.Duration(float64(time.Second) / *rate)
	}
	lastErr := ""
loop:
	for i := *startIndex; i < *startIndex+*count; i++ {
		if stopped(stop) {
			break
		}
		if interval > 0 {
			now := time.Now()
			if next.Before(now.Add(-time.Second)) {
				next = now.Add(-time.Second)
			}
			if next.After(now) {
				select {
				case <-stop:
					break loop
				case <-time.After(next.Sub(now)):
				}
			}
			next = next.Add(interval)
		}
		subj := *subject
		if *k > 1 {
			subj = fmt.Sprintf("%s.%d", *subject, i%*k)
		}
		id := fmt.Sprintf("%s-%d", *prefix, i)
		first := time.Now()
		attempts := 0
		backoff := 2 * time.Millisecond
		sent++
		for {
			attempts++
			m := nats.NewMsg(subj)
			m.Data = []byte(strconv.Itoa(i))
			pa, err := js.PublishMsg(m, nats.MsgId(id), nats.AckWait(wait))
			if err == nil {
				stall := time.Since(first)
				if lastErr != "" {
					logf("publish %s acked after %d attempts", id, attempts)
					lastErr = ""
				}
				if stall > maxStall {
					maxStall = stall
				}
				acked++
				o.line(map[string]interface{}{"id": id, "stream": pa.Stream, "seq": pa.Sequence, "duplicate": pa.Duplicate,
					"attempts": attempts, "stall_ms": ms(stall), "subject": subj, "t_ms": nowMs()})
				break
			}
			if err.Error() != lastErr {
				logf("publish %s attempt %d failed: %v", id, attempts, err)
				lastErr = err.Error()
			}
			elapsed := time.Since(first)
			if *noRetry || !retryable(err) || elapsed >= hz {
				failed++
				o.line(map[string]interface{}{"id": id, "failed": true, "attempts": attempts, "stall_ms": ms(elapsed),
					"error": err.Error(), "subject": subj, "t_ms": nowMs()})
				break
			}
			if stopped(stop) {
				abandoned++
				break
			}
			d := backoff
			if hz-elapsed < d {
				d = hz - elapsed
			}
			time.Sleep(d)
			backoff *= 2
			if backoff > 50*time.Millisecond {
				backoff = 50 * time.Millisecond
			}
		}
	}
	o.line(map[string]interface{}{"done": true, "acked": acked, "failed": failed, "max_stall_ms": ms(maxStall),
		"stopped": stopped(stop), "abandoned": abandoned, "sent": sent, "elapsed_s": time.Since(t0).Seconds()})
	logf("done: acked=%d failed=%d abandoned=%d max_stall_ms=%.1f", acked, failed, abandoned, ms(maxStall))
	nc.Close()
}
