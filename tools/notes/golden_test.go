package notes_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/notes"
)

var update = flag.Bool("update", false, "rewrite testdata/ from the changes in TestFoldOfARecordedStream (only when the events' schema changes on purpose)")

// TestFoldOfARecordedStream folds a recorded notes stream (testdata/planner.jsonl,
// one event per line) into the notes testdata/planner.want.json holds: notes
// recorded by an earlier build read the same in this one. With -update it records
// the stream again from the changes below, on a fixed clock, and rewrites both files.
func TestFoldOfARecordedStream(t *testing.T) {
	streamFile, wantFile := filepath.Join("testdata", "planner.jsonl"), filepath.Join("testdata", "planner.want.json")
	ctx := testCtx(t)
	if *update {
		log := openLog(t, t.TempDir(), false)
		clock := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
		n := newNotes(t, notes.Config{Log: log, Agent: "planner", Now: func() time.Time { clock = clock.Add(time.Minute); return clock }})
		box := toolbox(t, n)
		for i, c := range []struct{ op, args string }{
			{"add", `{"type":"fact","tags":["paris","museum"],"body":"The Louvre closes on Tuesdays."}`},
			{"add", `{"type":"todo","tags":["travel"],"body":"Book the train to Lyon."}`},
			{"add", `{"type":"preference","tags":["alice"],"body":"Alice prefers window seats."}`},
			{"update", `{"id":"n2","body":"Book the 9:04 train to Lyon.","tags":[]}`},
			{"remove", `{"id":"n3"}`},
			{"add", `{"body":"Ask Bob about the budget."}`},
			{"update", `{"id":"n1","type":"decision"}`},
		} {
			mustDo(t, box, "s-golden/"+string(rune('a'+i)), c.op, c.args)
		}
		events, err := log.Read(ctx, n.Stream(), 1)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		for _, e := range events {
			line, err := messages.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			b.Write(append(line, '\n'))
		}
		want, err := n.List(ctx, notes.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		wantJSON, _ := json.MarshalIndent(want, "", "  ")
		if err := os.WriteFile(streamFile, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(wantFile, append(wantJSON, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	f, err := os.Open(streamFile)
	if err != nil {
		t.Fatalf("%v (record it with go test ./tools/notes -run TestFoldOfARecordedStream -update)", err)
	}
	defer f.Close()
	var events []messages.Envelope
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		e, err := messages.Unmarshal(sc.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, e)
	}
	log := openLog(t, t.TempDir(), false)
	if err := log.Append(ctx, events); err != nil {
		t.Fatal(err)
	}
	n := newNotes(t, notes.Config{Log: log, Agent: "planner"})
	got, err := n.List(ctx, notes.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	gotJSON, _ := json.MarshalIndent(got, "", "  ")
	want, err := os.ReadFile(wantFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(append(gotJSON, '\n'), want) {
		t.Errorf("the fold of %s:\n%s\nwant (%s):\n%s", streamFile, gotJSON, wantFile, want)
	}
	// The recorded calls are in the fold: made again, they change nothing.
	if _, err := toolbox(t, n).Call(ctx, tools.Call{Key: "s-golden/a", Arguments: `{"op":"add","args":{"body":"again"}}`}); err != nil {
		t.Fatal(err)
	}
	if again, _ := n.List(ctx, notes.Filter{}); again.Matched != got.Matched {
		t.Errorf("a recorded call made again added a note: %d notes, want %d", again.Matched, got.Matched)
	}
}
