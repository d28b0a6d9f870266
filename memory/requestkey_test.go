package memory_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/troupe-run/troupe/memory"
)

// A key made by RequestKey names one request: the same request sent again gets the
// first result, another one (even of memories the namespace holds, with other
// metadata) fails with ErrKeyReused and writes nothing. A key applied as it is,
// before keys carried their request's digest, still refuses other memories.
func TestRequestKeyNamesOneRequest(t *testing.T) {
	f := newFixture(t)
	ns := f.ns(t, "user:alice")
	ctx := testCtx(t)
	tea := memory.AddRequest{Tier: memory.Semantic, Content: "Alice likes tea", Metadata: json.RawMessage(`{"src":"chat"}`)}
	first := add(t, ns, memory.RequestKey("http/k1/user:alice", "d1"), tea)
	again, err := ns.Add(ctx, memory.RequestKey("http/k1/user:alice", "d1"), []memory.AddRequest{tea})
	if err != nil || again[0].ID != first[0].ID || !again[0].Repeat {
		t.Fatalf("the same request again: %+v %v; want %s, a repeat", again, err, first[0].ID)
	}
	other := tea
	other.Metadata = json.RawMessage(`{"src":"email"}`)
	before := len(events(t, f.log, "user:alice"))
	if _, err := ns.Add(ctx, memory.RequestKey("http/k1/user:alice", "d2"), []memory.AddRequest{other}); !errors.Is(err, memory.ErrKeyReused) {
		t.Errorf("another request under the key: %v; want ErrKeyReused", err)
	}
	if err := ns.CheckKey(memory.RequestKey("http/k1/user:alice", "d2"), []memory.AddRequest{other}); !errors.Is(err, memory.ErrKeyReused) {
		t.Errorf("CheckKey of another request under the key: %v; want ErrKeyReused", err)
	}
	if n := len(events(t, f.log, "user:alice")); n != before {
		t.Errorf("the refused request wrote %d events", n-before)
	}

	// A key applied without a digest.
	old := add(t, ns, "http/k2/user:alice", memory.AddRequest{Tier: memory.Semantic, Content: "Alice likes cocoa"})
	coffee := []memory.AddRequest{{Tier: memory.Semantic, Content: "Alice likes coffee"}}
	if _, err := ns.Add(ctx, memory.RequestKey("http/k2/user:alice", "d3"), coffee); !errors.Is(err, memory.ErrKeyReused) {
		t.Errorf("other memories under a key applied without a digest: %v; want ErrKeyReused", err)
	}
	if err := ns.CheckKey(memory.RequestKey("http/k2/user:alice", "d3"), coffee); !errors.Is(err, memory.ErrKeyReused) {
		t.Errorf("CheckKey: other memories under a key applied without a digest: %v; want ErrKeyReused", err)
	}
	got, err := ns.Add(ctx, memory.RequestKey("http/k2/user:alice", "d4"), []memory.AddRequest{{Tier: memory.Semantic, Content: "Alice likes cocoa"}})
	if err != nil || got[0].ID != old[0].ID {
		t.Errorf("its request again: %+v %v; want %s", got, err, old[0].ID)
	}
}

// A request written in parts, each under RequestPartKey, names its client's key
// as one written whole does: the key sent again with another request is refused
// whether either is written whole or in parts (a node that routes memory writes
// cuts a namespace's share past its message size), and the same request gets
// its first result. A part's key applied before keys carried their request's
// digest (the client's key and "/<part>") still refuses other memories.
func TestRequestPartKeyNamesTheClientsKey(t *testing.T) {
	f := newFixture(t)
	ns := f.ns(t, "user:alice")
	ctx := testCtx(t)
	tea := memory.AddRequest{Tier: memory.Semantic, Content: "Alice likes tea"}
	cocoa := memory.AddRequest{Tier: memory.Semantic, Content: "Alice likes cocoa"}
	mate := memory.AddRequest{Tier: memory.Semantic, Content: "Alice likes mate"}

	// Whole first, then in parts.
	add(t, ns, memory.RequestKey("http/k1/user:alice", "d1"), tea)
	if _, err := ns.Add(ctx, memory.RequestPartKey("http/k1/user:alice", "d2", 0), []memory.AddRequest{cocoa}); !errors.Is(err, memory.ErrKeyReused) {
		t.Errorf("another request in parts under a key applied whole: %v; want ErrKeyReused", err)
	}
	if err := ns.CheckKey(memory.RequestPartKey("http/k1/user:alice", "d2", 1), []memory.AddRequest{cocoa}); !errors.Is(err, memory.ErrKeyReused) {
		t.Errorf("CheckKey: another request in parts under a key applied whole: %v; want ErrKeyReused", err)
	}

	// In parts first, then whole; the parts of the same request again.
	p0 := add(t, ns, memory.RequestPartKey("http/k2/user:alice", "d3", 0), cocoa)
	p1 := add(t, ns, memory.RequestPartKey("http/k2/user:alice", "d3", 1), mate)
	if _, err := ns.Add(ctx, memory.RequestKey("http/k2/user:alice", "d4"), []memory.AddRequest{tea}); !errors.Is(err, memory.ErrKeyReused) {
		t.Errorf("another request whole under a key applied in parts: %v; want ErrKeyReused", err)
	}
	for i, c := range []struct {
		req  memory.AddRequest
		want string
	}{{cocoa, p0[0].ID}, {mate, p1[0].ID}} {
		got, err := ns.Add(ctx, memory.RequestPartKey("http/k2/user:alice", "d3", i), []memory.AddRequest{c.req})
		if err != nil || got[0].ID != c.want || !got[0].Repeat {
			t.Errorf("part %d again: %+v %v; want %s, a repeat", i, got, err, c.want)
		}
	}

	// A part applied without a digest, under the client's key and "/<part>".
	add(t, ns, "http/k3/user:alice/0", memory.AddRequest{Tier: memory.Semantic, Content: "Alice likes chai"})
	if _, err := ns.Add(ctx, memory.RequestPartKey("http/k3/user:alice", "d5", 0), []memory.AddRequest{{Tier: memory.Semantic, Content: "Alice likes rooibos"}}); !errors.Is(err, memory.ErrKeyReused) {
		t.Errorf("other memories under a part applied without a digest: %v; want ErrKeyReused", err)
	}
}

// A memory's history shows the key its client sent, not the digest of the
// request RequestKey (or RequestPartKey) adds to it; a key without one shows as
// it is.
func TestHistoryShowsTheClientsKey(t *testing.T) {
	f := newFixture(t)
	ns := f.ns(t, "user:alice")
	ctx := testCtx(t)
	for key, want := range map[string]string{
		memory.RequestKey("http/k1/user:alice", "d1"):        "http/k1/user:alice",
		memory.RequestPartKey("http/k2/user:alice", "d2", 1): "http/k2/user:alice",
		"http/k3/user:alice":                                 "http/k3/user:alice",
	} {
		got := add(t, ns, key, memory.AddRequest{Tier: memory.Semantic, Content: "Alice likes " + want})
		h, err := ns.History(ctx, got[0].ID)
		if err != nil || len(h) != 1 || h[0].Key != want {
			t.Errorf("history of the memory added under %q: %+v %v; want key %q", key, h, err, want)
		}
	}
}
