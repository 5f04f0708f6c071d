package main

import "testing"

// The route record rules of docs/protocol.md (R2, R6) as parseRoute and
// targets read them.
func TestParseRoute(t *testing.T) {
	home := binding{"ORDERS", "C"}
	for _, c := range []struct {
		name, json string
		valid      bool
		fence      int64 // -1: none
		old, nw    string
		version    string
	}{
		{"version 1", `{"stream":"B","consumer":"C","checkpoint":5,"start_seq":6}`, true, -1, "", "B/C", "1"},
		{"fenced", `{"version":2,"migration":"A.B","mode":"fence","state":"fenced","stream":"B","consumer":"C","old_stream":"A","old_consumer":"C","fence":1041,"checkpoint":1041,"nak_delay_ms":30000,"new_version":null,"x":1}`, true, 1041, "A/C", "B/C", "1"},
		{"fence wins over checkpoint", `{"version":2,"migration":"A.B","mode":"fence","state":"fenced","stream":"B","consumer":"C","fence":7,"checkpoint":9}`, true, 7, "ORDERS/C", "B/C", "1"},
		{"settled", `{"version":2,"migration":"A.B","mode":"fence","state":"settled","stream":"B","consumer":"C","fence":7}`, true, 7, "", "B/C", "1"},
		{"ordered fenced", `{"version":2,"migration":"A.B","mode":"fence","state":"fenced","stream":"B","consumer":"C","fence":7,"ordered":true}`, true, 7, "ORDERS/C", "", "1"},
		{"rolling, old version", `{"version":2,"migration":"A.B","mode":"rolling","state":"moved","stream":"B","consumer":"C","fence":7,"new_version":"2"}`, true, 7, "ORDERS/C", "", "1"},
		{"rolling, new version", `{"version":2,"migration":"A.B","mode":"rolling","state":"fenced","stream":"B","consumer":"C","fence":7,"new_version":"2"}`, true, 7, "ORDERS/C", "B/C", "2"},
		{"max u64 fence", `{"version":2,"migration":"A.B","mode":"fence","state":"fenced","stream":"B","consumer":"C","fence":18446744073709551615}`, true, -2, "ORDERS/C", "B/C", "1"},
		{"rolling, numeric new_version", `{"version":2,"migration":"A.B","mode":"rolling","state":"fenced","stream":"B","consumer":"C","fence":7,"new_version":2}`, false, 0, "", "", ""},
		{"fenced without fence", `{"version":2,"migration":"A.B","mode":"fence","state":"fenced","stream":"B","consumer":"C"}`, false, 0, "", "", ""},
		{"fence as a string", `{"version":2,"migration":"A.B","mode":"fence","state":"fenced","stream":"B","consumer":"C","fence":"7"}`, false, 0, "", "", ""},
		{"unknown state", `{"version":2,"migration":"A.B","mode":"fence","state":"paused","stream":"B","consumer":"C","fence":7}`, false, 0, "", "", ""},
		{"unknown mode", `{"version":2,"mode":"teleport","stream":"B","consumer":"C"}`, false, 0, "", "", ""},
		{"empty (a delete marker's value)", ``, false, 0, "", "", ""},
		{"not an object", `[1]`, false, 0, "", "", ""},
	} {
		r, err := parseRoute([]byte(c.json))
		if (err == nil) != c.valid {
			t.Errorf("%s: valid %v, got error %v", c.name, c.valid, err)
			continue
		}
		if !c.valid {
			continue
		}
		f := fenceOf(r)
		switch {
		case c.fence == -1 && f != nil, c.fence >= 0 && (f == nil || f.Fence != uint64(c.fence)),
			c.fence == -2 && (f == nil || f.Fence != ^uint64(0)):
			t.Errorf("%s: fence %v, want %d", c.name, f, c.fence)
		}
		old, nw := targets(r, home, c.version)
		str := func(b *binding) string {
			if b == nil {
				return ""
			}
			return b.String()
		}
		if str(old) != c.old || str(nw) != c.nw {
			t.Errorf("%s: targets (%q, %q), want (%q, %q)", c.name, str(old), str(nw), c.old, c.nw)
		}
	}
	if old, nw := targets(nil, home, "1"); old == nil || *old != home || nw != nil {
		t.Errorf("no record: targets (%v, %v), want the home binding only", old, nw)
	}
}
