package memory_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/redact"
)

// Every field of a memory event that a caller writes is redacted before it is
// stored, not the content alone: "No secrets in events". A user pastes a token
// into a memory's metadata (a CRM record), its URI or a reason.
func TestMemoryEventsHoldNoSecretAnywhere(t *testing.T) {
	const secret = "tok-9f8e7d6c5b4a39281706"
	r := redact.New(secret)
	f := newFixture(t, func(c *memory.Config) { c.Redact = r.String })
	ctx := testCtx(t)
	ns := f.ns(t, "user:alice")
	res, err := ns.Add(ctx, "k1", []memory.AddRequest{
		{Tier: memory.Semantic, Content: "Alice's CRM record", Metadata: []byte(`{"crm_token":"` + secret + `"}`), Reason: "imported with " + secret},
		{Tier: memory.Perceptual, Modality: memory.Image, Content: "Alice's badge photo", URI: "https://files.example.com/badge.png?token=" + secret},
		{Tier: memory.Episodic, Content: "Alice met Bob", Participants: []string{"alice"}, Sources: nil},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Update(ctx, "k2", res[2].ID, memory.UpdateRequest{Metadata: []byte(`{"note":"key ` + secret + `"}`), Reason: "fixed with " + secret}); err != nil {
		t.Fatal(err)
	}
	if m, _ := ns.Get(res[0].ID); string(m.Metadata) != `{"crm_token":"[REDACTED]"}` {
		t.Errorf("metadata %s, want the secret redacted in the object", m.Metadata)
	}
	if err := ns.Forget(ctx, "k3", []string{res[2].ID}, "the user gave "+secret); err != nil {
		t.Fatal(err)
	}
	events, err := f.log.Read(ctx, memory.Stream("user:alice"), 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if strings.Contains(string(e.Payload), secret) {
			t.Errorf("seq %d %s stores the secret: %s", e.Seq, e.Type, e.Payload)
		}
	}
}

// A reason of a megabyte (a model's runaway answer given as the reason of a
// change) is cut to memory.MaxReasonBytes in the event, at a character and after
// its redaction: the change is made, and neither the namespace's folds nor the
// memory's history carry the megabyte.
func TestMemoryEventsBoundAReasonOfAMegabyte(t *testing.T) {
	const secret = "tok-9f8e7d6c5b4a39281706"
	r := redact.New(secret)
	f := newFixture(t, func(c *memory.Config) { c.Redact = r.String })
	ctx := testCtx(t)
	ns := f.ns(t, "user:alice")
	res, err := ns.Add(ctx, "k1", []memory.AddRequest{{Tier: memory.Semantic, Content: "Alice likes tea"}})
	if err != nil {
		t.Fatal(err)
	}
	// The secret straddles the bound: cut first, its start would escape redaction.
	long := strings.Repeat("é", (memory.MaxReasonBytes-10)/2) + secret + strings.Repeat("because ", 1<<17)
	if err := ns.Forget(ctx, "k2", []string{res[0].ID}, long); err != nil {
		t.Fatal(err)
	}
	hist, err := ns.History(ctx, res[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	why := hist[len(hist)-1].Reason
	if len(why) > memory.MaxReasonBytes || !utf8.ValidString(why) || !strings.HasSuffix(why, "…") || !strings.HasPrefix(why, "éé") {
		t.Errorf("forgotten with a reason of %d bytes: %.40q…%q", len(why), why, why[max(len(why)-40, 0):])
	}
	if strings.Contains(why, secret[:8]) {
		t.Errorf("the cut reason shows the start of the secret")
	}
}
