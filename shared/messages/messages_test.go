package messages

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	for _, m := range []any{
		Job{Tenant: "acme", Group: "1#0", Version: 3, Partition: 2, Output: "01JAAAAAAAAAAAAAAAAAAAAAAA"},
		CleanerNote{Tenant: "acme", Group: "2#86400000", Version: 1, Why: "commit", Nonce: "0"},
		BlockOp{Op: OpPublish, Tenant: "acme", Block: "01JAAAAAAAAAAAAAAAAAAAAAAA", Gen: 2},
		BlockOp{Op: OpDeleteStray, Tenant: "acme", Block: "01JAAAAAAAAAAAAAAAAAAAAAAA", Stray: []StrayVersion{{RelPath: "index", VersionID: "v1"}}},
		PlanRequest{Tenant: "acme", Group: "1#0", Why: "after"},
	} {
		body, err := Encode(m)
		if err != nil {
			t.Fatalf("Encode(%T): %v", m, err)
		}
		back, err := Decode(body)
		if err != nil {
			t.Fatalf("Decode(%s): %v", body, err)
		}
		if !reflect.DeepEqual(back, m) {
			t.Fatalf("round trip: got %#v, want %#v", back, m)
		}
	}
	if m, err := Decode(SweepBody); err != nil || m != (Sweep{}) {
		t.Fatalf("Decode(sweep) = %v, %v", m, err)
	}
}

func TestDecodeRejects(t *testing.T) {
	tests := []struct {
		name, body string
		notSluice  bool
	}{
		{"s3 event", `{"Records":[{"s3":{}}]}`, true},
		{"not json", `garbage`, true},
		{"unknown kind", `{"sluice":"nope","body":{}}`, false},
		{"unknown field", `{"sluice":"job","body":{"tenant":"a","group":"1#0","version":1,"partition":0,"output":"x","evil":1}}`, false},
		{"job without version", `{"sluice":"job","body":{"tenant":"a","group":"1#0","partition":0,"output":"x"}}`, false},
		{"op with bad kind", `{"sluice":"op","body":{"op":"EXPLODE","tenant":"a","block":"b","gen":1}}`, false},
		{"publish without gen", `{"sluice":"op","body":{"op":"PUBLISH","tenant":"a","block":"b"}}`, false},
		{"note without group", `{"sluice":"cleaner","body":{"tenant":"a"}}`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(tc.body)
			if err == nil {
				t.Fatal("accepted")
			}
			if errors.Is(err, ErrNotSluice) != tc.notSluice {
				t.Fatalf("ErrNotSluice = %v, want %v (err %v)", errors.Is(err, ErrNotSluice), tc.notSluice, err)
			}
		})
	}
}

func TestDedupID(t *testing.T) {
	short := "op.PUBLISH.acme.01J.g2."
	if got := dedupID(short); got != short {
		t.Fatalf("dedupID kept a valid id? got %q", got)
	}
	long := strings.Repeat("x", 200)
	a, b := dedupID(long), dedupID(long+"y")
	if len(a) > 128 || a == b {
		t.Fatalf("long ids: %q (%d chars) vs %q", a, len(a), b)
	}
	if got := dedupID("tenant with space"); strings.ContainsRune(got, ' ') {
		t.Fatalf("space kept: %q", got)
	}
}

// FuzzDecode: no body, however malformed, makes Decode panic, and what it
// accepts re-encodes to something it accepts again.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{SweepBody, `{"sluice":"job","body":{"tenant":"a","group":"1#0","version":1,"partition":0,"output":"x"}}`,
		`{"sluice":"op","body":{"op":"DELETE","tenant":"a","block":"b","gen":3}}`, `{"Records":[]}`, `{}`, ``} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		m, err := Decode(body)
		if err != nil {
			return
		}
		if _, ok := m.(Sweep); ok {
			return
		}
		again, err := Encode(m)
		if err != nil {
			t.Fatalf("accepted %q but cannot re-encode %#v: %v", body, m, err)
		}
		if _, err := Decode(again); err != nil {
			t.Fatalf("re-encoded %q does not decode: %v", again, err)
		}
	})
}

// TestGroupIDsFitSQS: a FIFO group id is at most 128 characters, one key
// always maps to the same id and two keys to two.
func TestGroupIDsFitSQS(t *testing.T) {
	long := strings.Repeat("t", 150)
	a, b := groupID(long+"/01JAAAAAAAAAAAAAAAAAAAAAAA"), groupID(long+"/01JAAAAAAAAAAAAAAAAAAAAAAB")
	if len(a) > MaxGroupIDLength || len(b) > MaxGroupIDLength || a == b || a != groupID(long+"/01JAAAAAAAAAAAAAAAAAAAAAAA") {
		t.Fatalf("group ids %q (%d) and %q (%d)", a, len(a), b, len(b))
	}
	if short := "acme/01JAAAAAAAAAAAAAAAAAAAAAAA"; groupID(short) != short {
		t.Fatalf("a key that fits was changed: %q", groupID(short))
	}
}

// TestStrayOpFitsSQS: a DELETE_STRAY op with MaxStrayPerOp versions of a
// 150-character tenant's block stays far below SQS's 256 KiB.
func TestStrayOpFitsSQS(t *testing.T) {
	op := BlockOp{Op: OpDeleteStray, Tenant: strings.Repeat("t", 150), Block: "01JAAAAAAAAAAAAAAAAAAAAAAA", Gen: 1, Nonce: "s0123456789abcdef"}
	for i := range MaxStrayPerOp {
		op.Stray = append(op.Stray, StrayVersion{RelPath: fmt.Sprintf("chunks/%06d", i), VersionID: strings.Repeat("v", 64)})
	}
	body, err := Encode(op)
	if err != nil {
		t.Fatal(err)
	}
	if len(body) > MaxBodyBytes/2 {
		t.Fatalf("an op of %d strays is %d bytes; SQS takes %d", MaxStrayPerOp, len(body), MaxBodyBytes)
	}
}
