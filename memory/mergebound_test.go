package memory_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/memory"
)

// A merge gives the kept memory the metadata keys it lacks of the memories it
// absorbs, but only while its metadata stays within the limit a write holds it to
// (MaxContentBytes): the keys that do not fit stay in the absorbed memory's source,
// as a conflicting value does. Before, two duplicates with 9 KiB of metadata each
// merged into a memory of 18 KiB, which no update could then touch: adding one
// small key was refused as "metadata of 18… bytes; the limit is 16384".
func TestMergeKeepsMetadataWithinTheLimit(t *testing.T) {
	f := newFixture(t)
	ns := f.ns(t, "user:alice")
	ctx := testCtx(t)
	big := func(k, c string) json.RawMessage {
		b, _ := json.Marshal(map[string]string{k: strings.Repeat(c, 9<<10)})
		return b
	}
	res := add(t, ns, "",
		memory.AddRequest{Tier: memory.Semantic, Content: "Alice lives in Lisbon", Metadata: big("transcript", "a")},
		memory.AddRequest{Tier: memory.Semantic, Content: "Alice lives in Lisbon now", Metadata: big("crm", "b")},
		memory.AddRequest{Tier: memory.Semantic, Content: "Alice lives in Lisbon today", Metadata: json.RawMessage(`{"small":1}`)})
	m, err := ns.Merge(ctx, "merge", res[0].ID, []string{res[1].ID, res[2].ID}, "alike")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Metadata) > memory.DefaultMaxContentBytes {
		t.Errorf("merged metadata of %d bytes; the limit is %d", len(m.Metadata), memory.DefaultMaxContentBytes)
	}
	var meta map[string]string
	_ = json.Unmarshal(m.Metadata, &meta)
	if len(meta["transcript"]) != 9<<10 || meta["small"] != "" && meta["small"] != "1" {
		t.Errorf("merged metadata keys: %d bytes of transcript, small %q", len(meta["transcript"]), meta["small"])
	}
	if !strings.Contains(string(m.Metadata), `"small":1`) {
		t.Errorf("the small key that fits was not kept: %.80s…", m.Metadata)
	}
	var crm bool
	for _, s := range m.Sources {
		crm = crm || s.ID == res[1].ID && strings.Contains(string(s.Detail), `"crm"`)
	}
	if !crm {
		t.Errorf("the absorbed memory's crm key is in no source: %+v", m.Sources)
	}
	if _, err := ns.Update(ctx, "update", m.ID, memory.UpdateRequest{Metadata: json.RawMessage(`{"verified":true}`)}); err != nil {
		t.Errorf("update of the merged memory's metadata: %v", err)
	}
}
