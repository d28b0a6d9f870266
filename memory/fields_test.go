package memory_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/memory"
)

// A memory's content is bounded (MaxContentBytes, 16 KiB), and so are the other
// texts it carries: its metadata, outcome, URI and participants. Unbounded, one
// memory posted with a 100 KiB CRM record as metadata filled the memory tool's
// whole answer (64 KiB) whenever it ranked first, cutting off every other memory
// the agent searched for, and each event of the memory (an update, a promotion, a
// merge) wrote it again.
func TestAMemorysOtherTextsAreBoundedAsItsContent(t *testing.T) {
	f := newFixture(t)
	ctx := testCtx(t)
	ns := f.ns(t, "user:alice")
	big := strings.Repeat("x", 100<<10)
	for name, in := range map[string]memory.Input{
		"metadata":     {Namespace: "user:alice", Tier: "semantic", Content: "Alice's CRM record", Metadata: []byte(`{"record":"` + big + `"}`)},
		"outcome":      {Namespace: "user:alice", Tier: "episodic", Content: "Alice met Bob", Outcome: big},
		"uri":          {Namespace: "user:alice", Tier: "perceptual", Modality: "image", Content: "a photo", URI: "https://example.com/" + big},
		"participants": {Namespace: "user:alice", Tier: "episodic", Content: "a meeting", Participants: strings.Fields(strings.Repeat("someone ", 20<<10))},
	} {
		if err := in.Check(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := f.mem.Check(in); !errors.Is(err, memory.ErrInvalid) {
			t.Errorf("%s: Check: err %v, want memory.ErrInvalid", name, err)
		}
		if _, err := ns.Add(ctx, "k-"+name, []memory.AddRequest{in.Request("added over HTTP")}); !errors.Is(err, memory.ErrInvalid) {
			t.Errorf("%s: Add: err %v, want memory.ErrInvalid", name, err)
		}
	}
	if n := len(ns.Snapshot()); n != 0 {
		t.Errorf("%d memories written, want none", n)
	}
}
