// natsapp: stand-ins for users' applications, written with plain nats.go (the
// legacy JetStreamContext API of nats.go 1.22, Debian's
// golang-github-nats-io-go-nats-dev) from the client's own documentation and
// examples, not from nats-cutover's library. One binary, one subcommand per kind:
//
//	natsapp publisher --server URL --subject S --count N --rate R --id-prefix P --out F [...]
//	natsapp worker    --server URL --stream S --consumer C --mode pull|push --out F [...]
//	natsapp ordered   --server URL --stream S --out F [--deliver new|all]
//	natsapp kv-watch  --server URL --bucket B --out F [--key K]
//	natsapp kv-get    --server URL --bucket B --out F [--keys 100] [--first 0]
//	natsapp obj-get   --server URL --bucket B --out F [--objects 3] [--size BYTES]
//	natsapp fence     --server URL --stream S --consumer C --instance ID --out F [...]
//
// Each writes JSON lines to --out (tests/apps/README.md), logs to stderr, prints
// `ready` on stdout once set up, and on SIGTERM/SIGINT writes a last
// {"done": true, ...} line and exits 0.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
)

type out struct {
	mu sync.Mutex
	f  *os.File
}

func openOut(path string) *out {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fatal("cannot open %s: %v", path, err)
	}
	return &out{f: f}
}

// line writes one JSON object and its newline in one write (on disk once written).
func (o *out) line(v interface{}) {
	b, _ := json.Marshal(v)
	o.mu.Lock()
	o.f.Write(append(b, '\n'))
	o.mu.Unlock()
}

var appName = "natsapp"

func logf(format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "%s %s: %s\n", time.Now().Format("15:04:05"), appName, fmt.Sprintf(format, a...))
}

func fatal(format string, a ...interface{}) {
	logf(format, a...)
	os.Exit(2)
}

// limited logs a repeated error once, then at most every 5 s per key.
type limited struct {
	mu   sync.Mutex
	last map[string]time.Time
}

func (l *limited) logf(key, format string, a ...interface{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last = map[string]time.Time{}
	}
	if t, ok := l.last[key]; ok && time.Since(t) < 5*time.Second {
		return
	}
	l.last[key] = time.Now()
	logf(format, a...)
}

// stopChan is closed at SIGTERM/SIGINT.
func stopChan() chan struct{} {
	c := make(chan struct{})
	s := make(chan os.Signal, 2)
	signal.Notify(s, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-s
		close(c)
	}()
	return c
}

func stopped(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func connect(server, name string) *nats.Conn {
	deadline := time.Now().Add(30 * time.Second)
	for {
		nc, err := nats.Connect(server,
			nats.Name(name),
			nats.MaxReconnects(-1),
			nats.ReconnectWait(200*time.Millisecond),
			nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
				if err != nil {
					logf("disconnected: %v", err)
				}
			}),
			nats.ReconnectHandler(func(_ *nats.Conn) { logf("reconnected") }),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { logf("async error: %v", err) }),
		)
		if err == nil {
			return nc
		}
		if time.Now().After(deadline) {
			fatal("cannot connect to %s: %v", server, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func ready() {
	fmt.Println("ready")
}

func nowMs() int64 { return time.Now().UnixNano() / 1e6 }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func main() {
	if len(os.Args) < 2 {
		fatal("usage: natsapp publisher|worker|ordered|kv-watch|kv-get|obj-get|fence [flags]")
	}
	cmds := map[string]func([]string){
		"publisher": publisher,
		"worker":    worker,
		"ordered":   ordered,
		"kv-watch":  kvWatch,
		"kv-get":    kvGet,
		"obj-get":   objGet,
		"fence":     fence,
	}
	f, ok := cmds[os.Args[1]]
	if !ok {
		fatal("unknown kind %q", os.Args[1])
	}
	appName = "natsapp " + os.Args[1]
	f(os.Args[2:])
}
