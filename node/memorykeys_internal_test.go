package node

import (
	"fmt"
	"testing"
	"time"

	"github.com/troupe-run/troupe/memory"
)

// The table of recent Idempotency-Keys stays within requestKeysMax claims, its
// order of claims too, whatever the keys: each claimed and released (a request
// answered 4xx frees its key) or each claimed again after requestKeyTTL. Before,
// a released claim stayed in the order until its 24 hours were over: a client
// sending distinct keys with bad requests grew it without bound.
func TestMemoryRequestKeysStayBounded(t *testing.T) {
	var k requestKeys
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	for i := range 3 * requestKeysMax {
		key := fmt.Sprintf("key-%d", i)
		if ok, fresh := k.claim(key, "d", now); !ok || !fresh {
			t.Fatalf("claim %d: %v %v", i, ok, fresh)
		}
		k.release(key, "d")
	}
	if len(k.keys) != 0 || len(k.order) > 2*requestKeysMax {
		t.Errorf("after %d claims released: %d keys, %d in the order; want none, at most %d", 3*requestKeysMax, len(k.keys), len(k.order), 2*requestKeysMax)
	}
	at := now
	for range 3 * requestKeysMax {
		at = at.Add(requestKeyTTL)
		k.claim("same", "d", at)
	}
	if len(k.keys) != 1 || len(k.order) > 2*requestKeysMax {
		t.Errorf("one key claimed again every %s: %d keys, %d in the order", requestKeyTTL, len(k.keys), len(k.order))
	}
	if ok, _ := k.claim("same", "other", at.Add(time.Minute)); ok {
		t.Errorf("the key's last claim was let go")
	}
}

// The digest of a request of POST /v1/memories is that of what it asks the
// namespaces to store: the same request written otherwise (its metadata's keys in
// another order, a number as 1.0 or 1e0 for 1, a character as itself or as its
// escape, a default given or left out, a time in another zone) is the same
// request, its retry answered with the first answer, not 422; a request that
// stores anything else (a metadata value, even a large integer a float64 cannot
// tell from its neighbour) is another.
func TestMemoryRequestDigestIsCanonical(t *testing.T) {
	digest := func(body string) string {
		t.Helper()
		in, err := memory.DecodeInputs([]byte(body))
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		return memoryRequestDigest(in)
	}
	base := `{"namespace":"user:alice","tier":"semantic","content":"Alice likes tea","metadata":{"src":"chat","n":1,"tags":["a","b"],"o":{"x":1,"y":"é"}}}`
	for _, same := range []string{
		`{"content":"Alice likes tea","tier":"semantic","namespace":"user:alice","metadata":{"o":{"y":"é","x":1},"n":1,"src":"chat","tags":["a","b"]}}`,
		`{"namespace":"user:alice","tier":"semantic","content":"Alice likes tea","metadata":{"src":"chat","n":1.0,"tags":["a","b"],"o":{"x":1e0,"y":"\u00e9"}}}`,
		`{"namespace":"user:alice","tier":"semantic","content":"Alice likes tea","metadata":{"src":"ch\u0061t","n":10E-1,"tags":["a","b"],"o":{"x":0.1e1,"y":"é"}}}`,
		`{"namespace":"user:alice","tier":"semantic","content":"Alice likes tea","importance":0.5,"modality":"text","metadata":{"src":"chat","n":1,"tags":["a","b"],"o":{"x":1,"y":"é"}}}`,
	} {
		if digest(same) != digest(base) {
			t.Errorf("%s: another digest than %s", same, base)
		}
	}
	at := `{"namespace":"user:alice","tier":"episodic","content":"The review","timestamp":"2026-12-01T09:30:00Z"}`
	for _, same := range []string{
		`{"namespace":"user:alice","tier":"episodic","content":"The review","timestamp":"2026-12-01T10:30:00+01:00"}`,
		`{"namespace":"user:alice","tier":"episodic","content":"The review","timestamp":"2026-12-01T09:30:00.000Z"}`,
	} {
		if digest(same) != digest(at) {
			t.Errorf("%s: another digest than %s", same, at)
		}
	}
	for _, other := range []string{
		`{"namespace":"user:alice","tier":"semantic","content":"Alice likes tea","metadata":{"src":"chat","n":2,"tags":["a","b"],"o":{"x":1,"y":"é"}}}`,
		`{"namespace":"user:alice","tier":"semantic","content":"Alice likes tea","metadata":{"src":"chat","n":"1","tags":["a","b"],"o":{"x":1,"y":"é"}}}`,
		`{"namespace":"user:alice","tier":"semantic","content":"Alice likes tea","metadata":{"src":"chat","n":1,"tags":["b","a"],"o":{"x":1,"y":"é"}}}`,
		`{"namespace":"user:alice","tier":"semantic","content":"Alice likes tea","importance":0.6,"metadata":{"src":"chat","n":1,"tags":["a","b"],"o":{"x":1,"y":"é"}}}`,
		`{"namespace":"user:bob","tier":"semantic","content":"Alice likes tea","metadata":{"src":"chat","n":1,"tags":["a","b"],"o":{"x":1,"y":"é"}}}`,
	} {
		if digest(other) == digest(base) {
			t.Errorf("%s: the digest of %s", other, base)
		}
	}
	if a, b := digest(`{"namespace":"user:alice","tier":"semantic","content":"c","metadata":{"n":9007199254740993}}`),
		digest(`{"namespace":"user:alice","tier":"semantic","content":"c","metadata":{"n":9007199254740992}}`); a == b {
		t.Errorf("two integers a float64 does not tell apart have one digest")
	}
}

// The digest of a request of POST /v1/memories is stored beside its key in the
// namespace's events (memory.RequestKey): a key written by an earlier build
// must match its request's digest still. These are the digests of the code
// before requestDigest was shared with /v1/kb (requestkeys.go).
func TestMemoryRequestDigestIsStable(t *testing.T) {
	for _, c := range []struct{ body, digest string }{
		{`{"namespace":"user:alice","tier":"semantic","content":"Alice likes tea","metadata":{"src":"chat","n":1,"tags":["a","b"],"o":{"x":1,"y":"é"}}}`, "82032eb3cc16930f9cd7a5cb209f8233"},
		{`{"namespace":"user:alice","tier":"episodic","content":"The review","timestamp":"2026-12-01T09:30:00Z"}`, "f74280963b7372951ea445deda3738a4"},
		{`[{"namespace":"agent:planner","tier":"semantic","content":"one <b>&amp;</b>","importance":0.9},{"namespace":"agent:planner","tier":"working","content":"two","metadata":{"big":12345678901234567890,"f":0.1}}]`, "79f76b40319c774b6bb3a2db627aeaae"},
	} {
		in, err := memory.DecodeInputs([]byte(c.body))
		if err != nil {
			t.Fatalf("%s: %v", c.body, err)
		}
		if got := memoryRequestDigest(in); got != c.digest {
			t.Errorf("%s: digest %s, want %s as before", c.body, got, c.digest)
		}
	}
	if got := memoryRequestDigest(nil); got != "e3b0c44298fc1c149afbf4c8996fb924" {
		t.Errorf("no inputs: digest %s", got)
	}
}
