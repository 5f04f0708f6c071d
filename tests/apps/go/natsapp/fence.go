package main

// fence: a pull-consumer instance that follows docs/protocol.md in fence and
// rolling mode, written from that page alone (its *Rules in detail*) with
// plain nats.go 1.22 (the legacy JetStreamContext API), not from our library.
// The same flags and lines as tests/apps/fence_worker.py and
// tests/apps/js/fence_worker.mjs (tests/apps/README.md):
//
//	natsapp fence --server URL --stream S --consumer C --instance ID --out FILE
//	              [--app-version V] [--batch 32] [--expires 0.5] [--ttl 5]
//	              [--work-ms 0] [--lose-acks 0]
//
// It registers as inst.S.C.ID in KV bucket CUTOVER (created with history 1,
// file storage if missing; heartbeat every second; every write of the
// registration under one mutex, each from the record as it is then: R7;
// deleted on SIGTERM), reads then watches route.S.C and applies its entries
// in revision order (R8; a DEL/PURGE entry is no record, never parsed: R1; an
// invalid record is logged and ignored: R2), fetches the old and the new
// consumer in two concurrent loops (the old one's pull requests expire within
// 1 s: R5), naks an old-consumer message above the fence with
// max(nak_delay_ms, 1000) ms as a time.Duration (R4) without processing it,
// and acknowledges the fence once the record is in force (R7). Acks are
// double acks, m.AckSync, sent again on a timeout or "no responders" for 5 s
// (nats.go marks a message acked only once AckSync succeeded: js.go
// ackReply); a consumer that no longer exists ends the retries (R3).
//
// For the conformance check (scripts/protocol-check.py): --work-ms sleeps that
// long per message (an instance killed then holds messages up to the fence);
// --lose-acks N drops the first attempt of every N-th double ack (a lost ack:
// the retry must send +ACK again).
//
// Lines (--out): {"begin", "stream", "seq"} once a message is processed and
// before its ack; {"id", "stream", "seq", "delivered", "instance", "acked",
// "t_ms"} once its ack attempts are over; last {"done": true, "processed",
// "acked", "fenced_off", "dropped_lapsed"}. stdout: `ready` once registered
// and fetching.
//
// The registration is its lease (R15): when a write of it is taken after the
// record may have been ttl old (the process was stopped, the bucket out of
// reach), everything fetched before is dropped unanswered and the route read
// again before the next fetch. --stop-at N stops the process itself
// (SIGSTOP) in the middle of its N-th message (fault injection).

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
)

const cutoverBucket = "CUTOVER"

// ---- the route record -------------------------------------------------------

// route is a valid route record (R2). Fields the instance does not use are not
// kept (unknown fields are ignored).
type route struct {
	version     int64
	migration   string
	mode        string // drain, fence, rolling
	state       string // fenced, settled, moved
	stream      string
	consumer    string
	oldStream   string
	oldConsumer string
	fence       uint64
	hasFence    bool
	ordered     bool
	nakDelayMs  int64
	newVersion  string
}

type binding struct{ stream, consumer string }

func (b *binding) String() string { return b.stream + "/" + b.consumer }

func sameBinding(a, b *binding) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && *a == *b)
}

type fenceAck struct {
	Migration string `json:"migration"`
	Fence     uint64 `json:"fence"`
}

// parseRoute decodes a PUT entry's value; a non-nil error is the reason it is
// not a valid record (R2).
func parseRoute(data []byte) (*route, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber() // integers stay exact (sequences are u64) and are told from 1.5
	var raw map[string]interface{}
	if err := d.Decode(&raw); err != nil {
		return nil, fmt.Errorf("not a JSON object: %v", err)
	}
	str := func(k string) (string, bool, error) { // value, present, error
		v, ok := raw[k]
		if !ok || v == nil {
			return "", false, nil
		}
		s, ok := v.(string)
		if !ok {
			return "", true, fmt.Errorf("%s is not a string", k)
		}
		return s, true, nil
	}
	integer := func(k string) (uint64, bool, error) {
		v, ok := raw[k]
		if !ok || v == nil {
			return 0, false, nil
		}
		n, ok := v.(json.Number)
		if !ok {
			return 0, true, fmt.Errorf("%s is not a number", k)
		}
		u, err := strconv.ParseUint(n.String(), 10, 64)
		if err != nil {
			return 0, true, fmt.Errorf("%s is not an unsigned integer: %s", k, n)
		}
		return u, true, nil
	}
	r := &route{version: 1, mode: "drain", state: "moved"}
	var err error
	var ok bool
	if r.stream, ok, err = str("stream"); err != nil || !ok || r.stream == "" {
		return nil, errors.New("no string stream")
	}
	if r.consumer, ok, err = str("consumer"); err != nil || !ok || r.consumer == "" {
		return nil, errors.New("no string consumer")
	}
	if v, ok, err := integer("version"); err != nil {
		return nil, err
	} else if ok {
		r.version = int64(v)
	}
	if s, ok, err := str("mode"); err != nil {
		return nil, err
	} else if ok {
		r.mode = s
	}
	if s, ok, err := str("state"); err != nil {
		return nil, err
	} else if ok {
		r.state = s
	}
	switch r.mode {
	case "drain", "fence", "rolling":
	default:
		return nil, fmt.Errorf("unknown mode %q", r.mode)
	}
	switch r.state {
	case "fenced", "settled", "moved":
	default:
		return nil, fmt.Errorf("unknown state %q", r.state)
	}
	if r.migration, _, err = str("migration"); err != nil {
		return nil, err
	}
	if r.oldStream, _, err = str("old_stream"); err != nil {
		return nil, err
	}
	if r.oldConsumer, _, err = str("old_consumer"); err != nil {
		return nil, err
	}
	// F is `fence`; `checkpoint` (its version 1 name) is not read (R2).
	if r.fence, r.hasFence, err = integer("fence"); err != nil {
		return nil, err
	}
	if v, ok, err := integer("nak_delay_ms"); err != nil {
		return nil, err
	} else if ok {
		r.nakDelayMs = int64(v)
	}
	if v, ok := raw["ordered"]; ok && v != nil {
		b, isBool := v.(bool)
		if !isBool {
			return nil, errors.New("ordered is not a boolean")
		}
		r.ordered = b
	}
	if r.mode != "drain" {
		if !r.hasFence {
			return nil, fmt.Errorf("mode %s without an integer fence", r.mode)
		}
		if _, ok := raw["migration"].(string); !ok {
			return nil, fmt.Errorf("mode %s without a string migration", r.mode)
		}
	} else {
		r.hasFence = false // no fence in drain mode
	}
	if r.mode == "rolling" {
		s, ok := raw["new_version"].(string)
		if !ok {
			return nil, errors.New("mode rolling without a string new_version")
		}
		r.newVersion = s
	}
	return r, nil
}

// fenceOf is {migration, fence} the old consumer's messages are held to, or nil.
func fenceOf(r *route) *fenceAck {
	if r == nil || !r.hasFence {
		return nil
	}
	return &fenceAck{Migration: r.migration, Fence: r.fence}
}

// targets are the (old, new) bindings to fetch from under r (*States*).
func targets(r *route, home binding, appVersion string) (*binding, *binding) {
	if r == nil {
		return &home, nil
	}
	nw := &binding{r.stream, r.consumer}
	old := &binding{r.oldStream, r.oldConsumer}
	if old.stream == "" {
		old.stream = home.stream
	}
	if old.consumer == "" {
		old.consumer = home.consumer
	}
	if r.mode == "rolling" && r.newVersion != appVersion { // compared as strings (R6)
		return old, nil
	}
	if r.version < 2 || r.mode == "drain" || r.state == "moved" {
		return nil, nw
	}
	if r.state == "settled" {
		return nil, nw
	}
	if r.ordered { // fenced, ordered: nothing from the new durable before settled
		return old, nil
	}
	return old, nw
}

// ---- the instance -----------------------------------------------------------

type fenceApp struct {
	nc         *nats.Conn
	js         nats.JetStreamContext
	kv         nats.KeyValue
	o          *out
	rl         limited
	home       binding
	instance   string
	appVersion string
	key        string // inst.S.C.ID
	routeKey   string // route.S.C
	batch      int
	oldExpires time.Duration
	newExpires time.Duration
	ttl        time.Duration
	work       time.Duration
	loseAcks   int64
	stop       chan struct{}

	// The route in force and the revision of the entry it came from (R8),
	// and a channel closed (and replaced) at every change.
	mu       sync.Mutex
	route    *route
	routeRev uint64
	changed  chan struct{}
	applyMu  sync.Mutex // route entries are applied one at a time

	// The registration: every write holds regMu across the put (R7).
	regMu    sync.Mutex
	bound    map[string]*binding // "old", "new"
	fenceAck *fenceAck

	// The lease (R15): when the last registration write the server took
	// began, and how often the record may have been ttl old before the
	// next one landed; reread: the route must be read again before a fetch.
	leaseMu sync.Mutex
	written time.Time
	epoch   uint64
	reread  bool
	stopAt  int64 // fault injection: SIGSTOP in the middle of message N
	dropped int64 // lapses that dropped messages in hand (atomic)

	acks                        int64 // double acks begun (atomic)
	resent                      int64 // double acks confirmed only by a later attempt (atomic)
	processed, acked, fencedOff int64 // atomic
}

func (a *fenceApp) current() (*route, chan struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.route, a.changed
}

// writeRegistration puts the registration as it is now; the caller holds regMu.
func (a *fenceApp) writeRegistration() error {
	bound := []string{} // a JSON array, never null
	for _, role := range []string{"old", "new"} {
		if b := a.bound[role]; b != nil {
			s := b.String()
			if len(bound) == 0 || bound[0] != s {
				bound = append(bound, s)
			}
		}
	}
	rec := map[string]interface{}{
		"version":      1,
		"instance":     a.instance,
		"app_version":  a.appVersion, // a JSON string, always (R6)
		"lang":         "go",
		"stream":       a.home.stream,
		"consumer":     a.home.consumer,
		"bound":        bound,
		"fence_ack":    a.fenceAck, // null before any
		"ttl_ms":       a.ttl.Milliseconds(),
		"heartbeat_ms": nowMs(),
	}
	b, _ := json.Marshal(rec)
	start := time.Now()
	if _, err := a.kv.Put(a.key, b); err != nil {
		return err
	}
	a.leaseMu.Lock()
	defer a.leaseMu.Unlock()
	if a.leaseAge() >= a.ttl {
		// The runner may have counted this instance dead in between.
		a.epoch++
		a.reread = true
		logf("registration lapsed (epoch %d): dropping what was fetched before", a.epoch)
	}
	if start.After(a.written) {
		a.written = start
	}
	return nil
}

// leaseAge is how long ago the last taken write began, by the monotonic
// clock and by the wall clock (the monotonic one may stand still while a VM
// is paused); the caller holds leaseMu.
func (a *fenceApp) leaseAge() time.Duration {
	mono, wall := time.Since(a.written), time.Now().Round(0).Sub(a.written.Round(0))
	if wall > mono {
		return wall
	}
	return mono
}

// lease returns the lease's epoch, confirmed: the registration is written
// first when half its ttl passed since the last write began (again until the
// server takes it). A message fetched under an older epoch is dropped (R15).
func (a *fenceApp) lease() uint64 {
	for {
		a.leaseMu.Lock()
		age, ep := a.leaseAge(), a.epoch
		a.leaseMu.Unlock()
		if age < a.ttl/2 {
			return ep
		}
		if err := a.register(); err != nil {
			a.rl.logf("register", "registration: %v", err)
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// rereadRoute reads the route again after a lapse, before either loop
// fetches (the watch may still deliver what was written meanwhile; older
// entries are skipped by revision, R8). False: not read, try again.
func (a *fenceApp) rereadRoute() bool {
	a.leaseMu.Lock()
	need := a.reread
	a.leaseMu.Unlock()
	if !need {
		return true
	}
	if err := a.readRoute(); err != nil {
		a.rl.logf("read", "reading the route again: %v", err)
		time.Sleep(100 * time.Millisecond)
		return false
	}
	a.leaseMu.Lock()
	a.reread = false
	a.leaseMu.Unlock()
	return true
}

func (a *fenceApp) register() error {
	a.regMu.Lock()
	defer a.regMu.Unlock()
	return a.writeRegistration()
}

func (a *fenceApp) heartbeat(wg *sync.WaitGroup) {
	defer wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-a.stop:
			return
		case <-t.C:
		}
		if err := a.register(); err != nil {
			a.rl.logf("heartbeat", "heartbeat: %v", err)
		}
	}
}

// setBound changes one role's binding in the registration and writes it at
// once. Called only between fetches, with nothing in hand (R9).
func (a *fenceApp) setBound(role string, b *binding) {
	a.regMu.Lock()
	defer a.regMu.Unlock()
	if sameBinding(a.bound[role], b) {
		return
	}
	a.bound[role] = b
	if err := a.writeRegistration(); err != nil {
		a.rl.logf("register", "registration: %v", err)
	}
}

// routeEntry is one entry of route.S.C: from the get (js.GetLastMsg) or the watch.
type routeEntry struct {
	rev     uint64
	deleted bool // KV operation DEL or PURGE
	op      string
	value   []byte
}

// apply puts one entry in force, in revision order (R8), then acknowledges
// its fence (R7).
func (a *fenceApp) apply(e routeEntry) {
	a.applyMu.Lock()
	defer a.applyMu.Unlock()
	a.mu.Lock()
	if e.rev <= a.routeRev {
		a.mu.Unlock()
		return
	}
	a.routeRev = e.rev
	var r *route
	if !e.deleted {
		var err error
		if r, err = parseRoute(e.value); err != nil {
			a.mu.Unlock()
			logf("ignoring route revision %d (%v); keeping the current one", e.rev, err)
			return
		}
	}
	// In force before anything else: every old message handled from here on
	// is checked against this record (just before processing).
	a.route = r
	close(a.changed)
	a.changed = make(chan struct{})
	a.mu.Unlock()
	if r == nil {
		logf("route revision %d: removed (%s): no record, home binding", e.rev, e.op)
		return
	}
	f := fenceOf(r)
	a.regMu.Lock()
	if f != nil && (a.fenceAck == nil || *a.fenceAck != *f) {
		a.fenceAck = f
		err := a.writeRegistration()
		a.regMu.Unlock()
		if err != nil {
			logf("writing the fence acknowledgement: %v (the heartbeat writes it again)", err)
		} else {
			logf("acknowledged fence %s %d (revision %d, %s/%s)", f.Migration, f.Fence, e.rev, r.mode, r.state)
		}
		return
	}
	a.regMu.Unlock()
	logf("route revision %d: %s/%s -> %s/%s", e.rev, r.mode, r.state, r.stream, r.consumer)
}

// readRoute reads route.S.C's latest entry from the bucket stream's leader
// (STREAM.MSG.GET, not a direct get: R12) with its revision and operation.
// kv.Get would hide a delete marker as ErrKeyNotFound, without its revision.
func (a *fenceApp) readRoute() error {
	m, err := a.js.GetLastMsg("KV_"+cutoverBucket, "$KV."+cutoverBucket+"."+a.routeKey)
	if errors.Is(err, nats.ErrMsgNotFound) {
		return nil // never written (or gone with the bucket's limits): no record
	}
	if err != nil {
		return err
	}
	e := routeEntry{rev: m.Sequence, op: "PUT", value: m.Data}
	switch m.Header.Get("KV-Operation") {
	case "DEL", "PURGE":
		e.deleted, e.op = true, m.Header.Get("KV-Operation")
	}
	a.apply(e)
	return nil
}

func (a *fenceApp) watchRoute(wg *sync.WaitGroup) {
	defer wg.Done()
	for !stopped(a.stop) {
		w, err := a.kv.Watch(a.routeKey)
		if err != nil {
			a.rl.logf("watch", "route watch: %v; again in 200 ms", err)
			select {
			case <-a.stop:
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		// A watch set up again may have missed changes: read the key too.
		if err := a.readRoute(); err != nil {
			a.rl.logf("read", "reading the route: %v", err)
		}
	loop:
		for {
			select {
			case <-a.stop:
				break loop
			case e, ok := <-w.Updates():
				if !ok {
					logf("route watch ended; setting it up again")
					break loop
				}
				if e == nil {
					continue // the end of the initial values
				}
				op := opName(e.Operation())
				a.apply(routeEntry{rev: e.Revision(), op: op, value: e.Value(),
					deleted: e.Operation() == nats.KeyValueDelete || e.Operation() == nats.KeyValuePurge})
			}
		}
		w.Stop()
	}
}

// ---- fetching ---------------------------------------------------------------

type pullSub struct {
	b   binding
	sub *nats.Subscription
}

func (a *fenceApp) fetchLoop(role string, wg *sync.WaitGroup) {
	defer wg.Done()
	var ps *pullSub
	// The route as the last pull request went out: what it brings stays held
	// to its fence, even if a rollback deletes the route before it is handled
	// (R14).
	var under *route
	var lastEpoch uint64 // the lease's epoch when the last pull request went out
	expires := a.newExpires
	if role == "old" {
		expires = a.oldExpires
	}
	drop := func() {
		if ps != nil {
			// Messages delivered after the last Fetch returned wait in the
			// subscription: handle them before leaving the binding (R9).
			for i := 0; i < 10; i++ {
				n, _, err := ps.sub.Pending()
				if err != nil || n == 0 {
					break
				}
				msgs, _ := ps.sub.Fetch(n, nats.MaxWait(50*time.Millisecond))
				for _, m := range msgs {
					if !a.handle(m, role, under, lastEpoch) {
						break
					}
				}
			}
			ps.sub.Unsubscribe()
			ps = nil
		}
	}
	defer drop()
	errs := 0
	for !stopped(a.stop) {
		r, changed := a.current()
		old, nw := targets(r, a.home, a.appVersion)
		want := nw
		if role == "old" {
			want = old
		}
		if ps != nil && (want == nil || ps.b != *want) {
			drop()
		}
		// A binding leaves `bound` only here: the last fetch is over and every
		// message it delivered was handled.
		a.setBound(role, want)
		if want == nil {
			select {
			case <-a.stop:
			case <-changed:
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		var err error
		if ps == nil {
			var sub *nats.Subscription
			sub, err = a.js.PullSubscribe("", want.consumer, nats.Bind(want.stream, want.consumer))
			if err == nil {
				ps = &pullSub{*want, sub}
			}
		}
		// The lease first (R15), then the route as the pull request goes out.
		epoch := a.lease()
		a.leaseMu.Lock()
		reread := a.reread
		a.leaseMu.Unlock()
		if reread {
			a.rereadRoute()
			continue
		}
		var msgs []*nats.Msg
		if err == nil {
			under = r
			lastEpoch = epoch
			msgs, err = ps.sub.Fetch(a.batch, nats.MaxWait(expires))
		}
		if err != nil && !errors.Is(err, nats.ErrTimeout) {
			// Consumer not found or deleted (after `moved`; a rollback's new
			// durable), a leader change, a lost connection: never fatal (R10).
			errs++
			a.rl.logf("fetch-"+role, "fetch %s (%s): %v (%d errors)", want, role, err, errs)
			if ps != nil {
				ps.sub.Unsubscribe()
				ps = nil
			}
			select {
			case <-a.stop:
			case <-changed:
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		if errs > 0 && len(msgs) > 0 {
			logf("fetch %s (%s) delivering again", want, role)
			errs = 0
		}
		for _, m := range msgs {
			if !a.handle(m, role, under, epoch) {
				atomic.AddInt64(&a.dropped, 1)
				break // the rest of the batch is dropped with it
			}
		}
	}
}

// ---- one message ------------------------------------------------------------

// handle returns false when the lease lapsed since the message was fetched
// (R15): then it is dropped, neither processed nor acknowledged nor nak'd.
func (a *fenceApp) handle(m *nats.Msg, role string, under *route, epoch uint64) bool {
	md, err := m.Metadata()
	if err != nil {
		logf("a message without JetStream metadata (%v): ignored", err)
		return true
	}
	seq := md.Sequence.Stream
	if role == "old" {
		// The rule is checked just before processing, with the record in force
		// now (R5), and with the one in force when the batch was fetched (R14).
		now, _ := a.current()
		for _, r := range []*route{now, under} {
			f := fenceOf(r)
			if f == nil || seq <= f.Fence {
				continue
			}
			// Above the fence: the new durable delivers it. Never process it
			// here, never ack or term it: nak with the record's delay (R4),
			// a time.Duration (NakWithDelay(30000) would be 30 µs).
			delay := r.nakDelayMs
			if delay < 1000 {
				delay = 1000
			}
			if a.lease() != epoch {
				return false
			}
			if err := m.NakWithDelay(time.Duration(delay) * time.Millisecond); err != nil {
				a.rl.logf("nak", "nak of %s %d: %v", md.Stream, seq, err)
			}
			atomic.AddInt64(&a.fencedOff, 1)
			return true
		}
	}
	if a.stopAt > 0 && atomic.LoadInt64(&a.processed)+1 == a.stopAt {
		a.stopAt = 0
		logf("stopping in the middle of message %d (SIGSTOP), messages in hand", atomic.LoadInt64(&a.processed)+1)
		syscall.Kill(os.Getpid(), syscall.SIGSTOP)
	}
	if a.work > 0 {
		time.Sleep(a.work)
	}
	// The effect (here the ack and the records) only under the lease the
	// message was fetched under (R15).
	if a.lease() != epoch {
		return false
	}
	var id interface{}
	if v := m.Header.Get("Nats-Msg-Id"); v != "" {
		id = v
	}
	// Processed; its ack under way (the check counts this line for an
	// instance killed before the next one).
	a.o.line(map[string]interface{}{"begin": id, "stream": md.Stream, "seq": seq})
	acked := a.doubleAck(m, md)
	atomic.AddInt64(&a.processed, 1)
	if acked {
		atomic.AddInt64(&a.acked, 1)
	}
	a.o.line(map[string]interface{}{"id": id, "stream": md.Stream, "seq": seq, "delivered": md.NumDelivered,
		"instance": a.instance, "acked": acked, "t_ms": nowMs()})
	return true
}

// doubleAck: +ACK with a reply (AckSync), waiting for the server, sent again
// on a timeout or "no responders" for up to 5 s (20 ms doubling to 500 ms).
// AckSync sends again after a failure: it marks the message acked only once
// the request succeeded (nats.go js.go ackReply). Never a nak after it (R3).
func (a *fenceApp) doubleAck(m *nats.Msg, md *nats.MsgMetadata) bool {
	lose := a.loseAcks > 0 && atomic.AddInt64(&a.acks, 1)%a.loseAcks == 0
	started := time.Now()
	backoff := 20 * time.Millisecond
	for attempt := 1; ; attempt++ {
		var err error
		if lose && attempt == 1 {
			err = nats.ErrTimeout // simulated: the +ACK (or its reply) was lost
		} else {
			err = m.AckSync(nats.AckWait(time.Second))
		}
		if err == nil {
			if attempt > 1 {
				atomic.AddInt64(&a.resent, 1)
			}
			return true
		}
		if errors.Is(err, nats.ErrMsgAlreadyAckd) {
			// Only after a success: this program acks each message once.
			return true
		}
		if errors.Is(err, nats.ErrNoResponders) && a.consumerGone(md) {
			logf("ack of %s %d: its consumer %s is gone; processed, not acknowledged", md.Stream, md.Sequence.Stream, md.Consumer)
			return false
		}
		if time.Since(started) >= 5*time.Second {
			logf("ack of %s %d (%s) unconfirmed after %d attempts (%v): it may be delivered again",
				md.Stream, md.Sequence.Stream, m.Header.Get("Nats-Msg-Id"), attempt, err)
			return false
		}
		time.Sleep(backoff)
		if backoff *= 2; backoff > 500*time.Millisecond {
			backoff = 500 * time.Millisecond
		}
	}
}

func (a *fenceApp) consumerGone(md *nats.MsgMetadata) bool {
	_, err := a.js.ConsumerInfo(md.Stream, md.Consumer)
	return errors.Is(err, nats.ErrConsumerNotFound) || errors.Is(err, nats.ErrStreamNotFound)
}

// ---- main -------------------------------------------------------------------

// openBucket binds CUTOVER, creating it (history 1, file storage) if missing.
func (a *fenceApp) openBucket() nats.KeyValue {
	for !stopped(a.stop) {
		kv, err := a.js.KeyValue(cutoverBucket)
		if err == nil {
			return kv
		}
		if errors.Is(err, nats.ErrBucketNotFound) {
			logf("no bucket %s: creating it (history 1, file storage)", cutoverBucket)
			kv, err = a.js.CreateKeyValue(&nats.KeyValueConfig{Bucket: cutoverBucket, History: 1, Storage: nats.FileStorage})
			if err == nil {
				return kv
			}
			logf("creating the bucket: %v (another instance or the runner may have)", err)
		} else {
			a.rl.logf("bucket", "bucket %s: %v; retrying", cutoverBucket, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return nil
}

var validInstance = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

func fence(argv []string) {
	fs := flag.NewFlagSet("fence", flag.ExitOnError)
	server := fs.String("server", "", "NATS URL")
	stream := fs.String("stream", "", "home binding: the stream")
	consumer := fs.String("consumer", "", "home binding: an existing pull durable")
	instance := fs.String("instance", "", "unique id: letters, digits, _ and - (one KV key token)")
	outPath := fs.String("out", "", "JSON lines output")
	appVersion := fs.String("app-version", "go-1", "application version (a string)")
	batch := fs.Int("batch", 32, "messages per fetch")
	expires := fs.Float64("expires", 0.5, "seconds a fetch waits (the old consumer's: at most 1)")
	ttl := fs.Float64("ttl", 5, "registration ttl, seconds")
	workMs := fs.Int("work-ms", 0, "milliseconds spent processing each message")
	loseAcks := fs.Int("lose-acks", 0, "the first attempt of every N-th double ack is lost")
	stopAt := fs.Int("stop-at", 0, "fault injection: stop this process (SIGSTOP) in the middle of processing message N")
	fs.Parse(argv)
	if *server == "" || *stream == "" || *consumer == "" || *instance == "" || *outPath == "" {
		fatal("--server, --stream, --consumer, --instance, --out are required")
	}
	if !validInstance.MatchString(*instance) { // R11: no dots
		fatal("--instance must be letters, digits, _ and - (one KV key token)")
	}
	appName = "natsapp fence[" + *instance + "]"
	sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	a := &fenceApp{
		home:       binding{*stream, *consumer},
		instance:   *instance,
		appVersion: *appVersion,
		key:        strings.Join([]string{"inst", *stream, *consumer, *instance}, "."),
		routeKey:   "route." + *stream + "." + *consumer,
		batch:      *batch,
		oldExpires: sec(*expires),
		newExpires: sec(*expires),
		ttl:        sec(*ttl),
		work:       time.Duration(*workMs) * time.Millisecond,
		loseAcks:   int64(*loseAcks),
		stopAt:     int64(*stopAt),
		written:    time.Now(),
		changed:    make(chan struct{}),
		bound:      map[string]*binding{},
	}
	if a.oldExpires > time.Second {
		a.oldExpires = time.Second // a paused consumer answers nothing until expiry (R5)
	}
	a.o = openOut(*outPath)
	a.stop = stopChan()
	a.nc = connect(*server, "cutover-test-fence-go-"+*instance)
	var err error
	if a.js, err = a.nc.JetStream(nats.MaxWait(2 * time.Second)); err != nil {
		fatal("jetstream: %v", err)
	}
	if a.kv = a.openBucket(); a.kv == nil {
		a.o.line(map[string]interface{}{"done": true, "processed": 0, "acked": 0, "fenced_off": 0})
		return
	}
	// Read the record and act on it before the first fetch, then watch.
	for {
		if err := a.readRoute(); err == nil || stopped(a.stop) {
			break
		} else {
			a.rl.logf("read", "reading the route: %v; retrying", err)
			time.Sleep(200 * time.Millisecond)
		}
	}
	for err := a.register(); err != nil && !stopped(a.stop); err = a.register() {
		a.rl.logf("register", "registration: %v; retrying", err)
		time.Sleep(200 * time.Millisecond)
	}
	var bg, loops sync.WaitGroup
	bg.Add(2)
	go a.heartbeat(&bg)
	go a.watchRoute(&bg)
	loops.Add(2)
	go a.fetchLoop("old", &loops)
	go a.fetchLoop("new", &loops)
	ready()
	logf("registered as %s (version %q)", a.key, a.appVersion)
	loops.Wait() // SIGTERM: each loop ends its fetch and handles what it holds
	bg.Wait()
	a.regMu.Lock()
	if err := a.kv.Delete(a.key); err != nil {
		logf("deregister: %v", err)
	}
	a.regMu.Unlock()
	a.o.line(map[string]interface{}{"done": true, "processed": atomic.LoadInt64(&a.processed),
		"acked": atomic.LoadInt64(&a.acked), "fenced_off": atomic.LoadInt64(&a.fencedOff),
		"dropped_lapsed": atomic.LoadInt64(&a.dropped)})
	logf("done: processed=%d acked=%d fenced_off=%d acks_resent=%d", a.processed, a.acked, a.fencedOff, a.resent)
	a.nc.Close()
}
