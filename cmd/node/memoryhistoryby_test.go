package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// node memory history's table says by what each change was made (its key: the
// session event, the request or the consolidation run), as its JSON does: before,
// a merge's line named no run, and the table could not tell which consolidation
// merged a memory.
func TestMemoryHistoryTableNamesTheRunOfEachChange(t *testing.T) {
	data := memoryCLIEnv(t)
	kept := strings.TrimSpace(mustMemory(t, "add", "--data", data, "--namespace", "user:alice", "Alice lives in Lisbon"))
	mustMemory(t, "add", "--data", data, "--namespace", "user:alice", "Alice lives in Lisbon.")
	if out := mustMemory(t, "consolidate", "--data", data, "--namespace", "user:alice"); !strings.Contains(out, "merged 1") {
		t.Fatalf("consolidate merged nothing:\n%s", out)
	}
	var ans node.HistoryAnswer
	if err := json.Unmarshal([]byte(mustMemory(t, "history", "--data", data, "--json", kept)), &ans); err != nil {
		t.Fatal(err)
	}
	keys := map[messages.Type]string{}
	for _, c := range ans.History {
		keys[c.Type] = c.Key
	}
	if keys[messages.TypeMemoryAdded] == "" || keys[messages.TypeMemoryMerged] == "" {
		t.Fatalf("history --json of %s: %+v; want an add and a merge, each with its key", kept, ans.History)
	}
	out := mustMemory(t, "history", "--data", data, kept)
	lines := strings.Split(out, "\n")
	if len(lines) < 4 || !strings.Contains(lines[1], "BY") {
		t.Fatalf("history table has no BY column:\n%s", out)
	}
	for typ, key := range keys {
		found := false
		for _, l := range lines[2:] {
			found = found || strings.Contains(l, string(typ)) && strings.Contains(l, key)
		}
		if !found {
			t.Errorf("no line of %s naming %s in:\n%s", typ, key, out)
		}
	}
}
