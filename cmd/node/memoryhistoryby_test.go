package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/memory"
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

// The history table's columns line up on a terminal whatever its cells hold:
// a change whose content or reason is in wide characters (CJK, most emoji,
// two columns each) pushed the BY column of its line off the others', which
// text/tabwriter, counting one column a character, cannot see.
func TestMemoryHistoryTableAlignsWideCharacters(t *testing.T) {
	at := time.Date(2026, 12, 3, 8, 15, 58, 0, time.UTC)
	ans := node.HistoryAnswer{ID: "m1", Namespace: "user:アリス", History: []memory.Change{
		{Seq: 2, At: at, Type: messages.TypeMemoryAdded, Reason: "added over HTTP", Key: "http/chat-42/user:アリス", Memory: &memory.Memory{Content: "アリスはリスボンに住んでいる 🏠"}},
		{Seq: 5, At: at, Type: messages.TypeMemoryUpdated, Reason: "更新 by the agent", Key: "s-1/8", Memory: &memory.Memory{Content: "Alice lives in Lisbon, café"}},
		{Seq: 9, At: at, Type: messages.TypeMemoryForgotten, Reason: "importance 0.05 < 0.2", Key: "cli/0543/forget-7b67"},
	}}
	var b strings.Builder
	writeHistory(&b, ans)
	// columns is the number of terminal columns s takes: two for the wide
	// characters of this test, one for the others.
	columns := func(s string) int {
		n := 0
		for _, r := range s {
			switch {
			case r >= 0x3000 && r <= 0x9fff, r >= 0x1f300 && r <= 0x1faff:
				n += 2
			default:
				n++
			}
		}
		return n
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	var by []int
	for i, key := range []string{"BY", "http/chat-42", "s-1/8", "cli/0543"} {
		l := lines[1+i]
		k := strings.Index(l, key)
		if k < 0 {
			t.Fatalf("line %d has no %s:\n%s", 2+i, key, b.String())
		}
		by = append(by, columns(l[:k]))
	}
	for i := range by {
		if by[i] != by[0] {
			t.Errorf("the BY column starts at columns %v of the lines, not at one:\n%s", by, b.String())
			break
		}
	}
}
