package notes_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/notes"
)

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func openLog(t *testing.T, dir string, shared bool) *sqlite.Log {
	t.Helper()
	l, err := sqlite.Open(testCtx(t), sqlite.Config{Dir: dir, Shared: shared})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func newNotes(t *testing.T, cfg notes.Config) *notes.Notes {
	t.Helper()
	n, err := notes.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func toolbox(t *testing.T, n *notes.Notes) *tools.Toolbox {
	t.Helper()
	box, err := n.Toolbox()
	if err != nil {
		t.Fatal(err)
	}
	return box
}

// do calls the collapsed tool with op and args under key.
func do(t *testing.T, box tools.Tool, key, op, args string) (string, error) {
	t.Helper()
	return box.Call(testCtx(t), tools.Call{Key: key, Arguments: fmt.Sprintf(`{"op":%q,"args":%s}`, op, args)})
}

func mustDo(t *testing.T, box tools.Tool, key, op, args string) string {
	t.Helper()
	out, err := do(t, box, key, op, args)
	if err != nil {
		t.Fatalf("%s %s: %v", op, args, err)
	}
	return out
}

type note struct {
	ID   string   `json:"id"`
	Type string   `json:"type"`
	Tags []string `json:"tags"`
	Body string   `json:"body"`
}

type page struct {
	Notes   []note `json:"notes"`
	Matched int    `json:"matched"`
}

func decode[T any](t *testing.T, out string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("decoding %s: %v", out, err)
	}
	return v
}

func bodies(p page) []string {
	var out []string
	for _, n := range p.Notes {
		out = append(out, n.Body)
	}
	return out
}

func TestAddListSearchUpdateRemove(t *testing.T) {
	box := toolbox(t, newNotes(t, notes.Config{Log: openLog(t, t.TempDir(), false), Agent: "planner"}))

	museum := decode[note](t, mustDo(t, box, "s/1", "add", `{"type":"Fact","tags":["Paris","travel","paris"],"body":"The Louvre closes on Tuesdays."}`))
	if museum.ID == "" || museum.Type != "fact" || strings.Join(museum.Tags, ",") != "paris,travel" {
		t.Fatalf("add: %+v; want an id, type fact and the tags lowercased, sorted, once each", museum)
	}
	todo := decode[note](t, mustDo(t, box, "s/2", "add", `{"type":"todo","tags":["travel"],"body":"Book the train to Lyon."}`))
	plain := decode[note](t, mustDo(t, box, "s/3", "add", `{"body":"Alice prefers window seats."}`))
	if plain.Type != "note" {
		t.Errorf("a note added without a type has type %q, want note", plain.Type)
	}

	all := decode[page](t, mustDo(t, box, "", "list", `{}`))
	if got := strings.Join(bodies(all), "|"); all.Matched != 3 || got != "Alice prefers window seats.|Book the train to Lyon.|The Louvre closes on Tuesdays." {
		t.Errorf("list: %d matched, %s; want the three notes, newest first", all.Matched, got)
	}
	if got := decode[page](t, mustDo(t, box, "", "list", `{"tags":["travel"],"limit":1}`)); got.Matched != 2 || len(got.Notes) != 1 || got.Notes[0].ID != todo.ID {
		t.Errorf("list by tag, limit 1: %+v; want the todo of 2 matched", got)
	}
	if got := decode[page](t, mustDo(t, box, "", "list", `{"type":"fact"}`)); got.Matched != 1 || got.Notes[0].ID != museum.ID {
		t.Errorf("list by type: %+v", got)
	}

	found := decode[page](t, mustDo(t, box, "", "search", `{"query":"when is the museum in paris closed?"}`))
	if len(found.Notes) == 0 || found.Notes[0].ID != museum.ID {
		t.Errorf("search by tag and body: %+v; want the Louvre note first", found)
	}
	if got := decode[page](t, mustDo(t, box, "", "search", `{"query":"train","type":"fact"}`)); len(got.Notes) != 0 {
		t.Errorf("search filtered by type found %+v", got)
	}
	if got := decode[page](t, mustDo(t, box, "", "search", `{"query":"todo"}`)); len(got.Notes) != 1 || got.Notes[0].ID != todo.ID {
		t.Errorf("search by type: %+v", got)
	}

	up := decode[note](t, mustDo(t, box, "s/4", "update", fmt.Sprintf(`{"id":%q,"body":"Book the 9:04 train to Lyon.","tags":[]}`, todo.ID)))
	if up.Type != "todo" || up.Body != "Book the 9:04 train to Lyon." || len(up.Tags) != 0 {
		t.Errorf("update of body and tags: %+v; want the type kept, body and tags replaced", up)
	}
	if got := decode[page](t, mustDo(t, box, "", "list", `{}`)); got.Notes[0].ID != todo.ID {
		t.Errorf("after update, list starts with %s; want the updated note first", got.Notes[0].ID)
	}

	if out := mustDo(t, box, "s/5", "remove", fmt.Sprintf(`{"id":%q}`, museum.ID)); !strings.Contains(out, museum.ID) {
		t.Errorf("remove said %s", out)
	}
	if got := decode[page](t, mustDo(t, box, "", "search", `{"query":"louvre"}`)); len(got.Notes) != 0 {
		t.Errorf("a removed note is still found: %+v", got)
	}

	// Expanded, the same operations are tools of their own with their own schemas.
	var names []string
	for _, tool := range box.Expand() {
		names = append(names, tool.Spec().Name)
	}
	if strings.Join(names, ",") != "notes_add,notes_list,notes_search,notes_update,notes_remove" {
		t.Errorf("expanded: %v", names)
	}
	add := box.Expand()[0]
	var schema struct {
		Required   []string                   `json:"required"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(add.Spec().Parameters, &schema); err != nil || strings.Join(schema.Required, ",") != "body" || len(schema.Properties) != 3 {
		t.Errorf("notes_add schema: %s (%v); want type, tags and body, body required", add.Spec().Parameters, err)
	}
	out, err := add.Call(testCtx(t), tools.Call{Key: "s/6", Arguments: `{"body":"Expanded works."}`})
	if err != nil || !strings.Contains(out, "Expanded works.") {
		t.Errorf("notes_add: %s, %v", out, err)
	}
}

func TestSameKeyChangesOnce(t *testing.T) {
	log := openLog(t, t.TempDir(), false)
	box := toolbox(t, newNotes(t, notes.Config{Log: log}))

	first := mustDo(t, box, "sess/7", "add", `{"body":"Once."}`)
	again := mustDo(t, box, "sess/7", "add", `{"body":"Once."}`)
	if first != again {
		t.Errorf("the same call twice: %s then %s; want the same note", first, again)
	}
	id := decode[note](t, first).ID

	mustDo(t, box, "sess/8", "update", fmt.Sprintf(`{"id":%q,"body":"Twice."}`, id))
	mustDo(t, box, "sess/8", "update", fmt.Sprintf(`{"id":%q,"body":"Twice."}`, id))
	mustDo(t, box, "sess/9", "remove", fmt.Sprintf(`{"id":%q}`, id))
	// Re-issued after the note is gone, the remove that removed it succeeds again.
	if _, err := do(t, box, "sess/9", "remove", fmt.Sprintf(`{"id":%q}`, id)); err != nil {
		t.Errorf("the same remove again: %v", err)
	}

	// A second Notes on the same log (another node, after a restart) folds the
	// stream and knows the keys too.
	other := toolbox(t, newNotes(t, notes.Config{Log: log}))
	if out := mustDo(t, other, "sess/10", "add", `{"body":"Fresh."}`); !strings.Contains(out, "Fresh.") {
		t.Fatal(out)
	}
	// The add re-issued after its note was removed adds nothing; the note is gone.
	if _, err := do(t, other, "sess/7", "add", `{"body":"Once."}`); !errors.Is(err, notes.ErrUnknownNote) {
		t.Errorf("the add again after its note was removed: %v; want ErrUnknownNote", err)
	}
	if _, err := do(t, other, "sess/9", "remove", fmt.Sprintf(`{"id":%q}`, id)); err != nil {
		t.Errorf("the same remove on another Notes: %v", err)
	}

	events, err := log.Read(testCtx(t), notes.Stream("default"), 1)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range events {
		types = append(types, string(e.Type))
	}
	if got := strings.Join(types, ","); got != "note.added,note.updated,note.removed,note.added" {
		t.Errorf("events: %s; want each change once", got)
	}
}

func TestFoldAfterReopeningTheLog(t *testing.T) {
	dir := t.TempDir()
	ctx := testCtx(t)
	log, err := sqlite.Open(ctx, sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	n := newNotes(t, notes.Config{Log: log, Agent: "a1"})
	keep, err := n.Add(ctx, "decision", []string{"db"}, "Use SQLite embedded.")
	if err != nil {
		t.Fatal(err)
	}
	gone, _ := n.Add(ctx, "todo", nil, "Write the tests.")
	body := "Use SQLite embedded, ClickHouse in a cluster."
	if _, err := n.Update(ctx, keep.ID, nil, &[]string{"db", "storage"}, &body); err != nil {
		t.Fatal(err)
	}
	if err := n.Remove(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
	before, err := n.List(ctx, notes.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}

	reopened := newNotes(t, notes.Config{Log: openLog(t, dir, false), Agent: "a1"})
	after, err := reopened.List(ctx, notes.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(before)
	a, _ := json.Marshal(after)
	if string(a) != string(b) || after.Matched != 1 || after.Notes[0].Body != body || len(after.Notes[0].Tags) != 2 {
		t.Errorf("after reopening:\n got %s\nwant %s", a, b)
	}
	// Another agent's notes are another stream.
	if other, _ := newNotes(t, notes.Config{Log: openLog(t, dir+"-other", false), Agent: "a2"}).List(ctx, notes.Filter{}); other.Matched != 0 {
		t.Errorf("agent a2 sees %+v", other)
	}
}

// racingLog lets another writer take the seq of the first appends to the notes
// stream, as a second node would, just before they land.
type racingLog struct {
	eventlog.Log
	mu     sync.Mutex
	steals int // appends still to lose their seq
	always bool
}

func (l *racingLog) Append(ctx context.Context, events []messages.Envelope) error {
	l.mu.Lock()
	steal := l.always || l.steals > 0
	if steal {
		l.steals--
	}
	l.mu.Unlock()
	if steal {
		if l.always {
			return fmt.Errorf("append: %w", eventlog.ErrSeqConflict)
		}
		e := events[0]
		thief, err := messages.NewEnvelope(&messages.NoteAdded{NoteID: fmt.Sprintf("n%d", e.Seq), Type: "note", Body: fmt.Sprintf("stolen seq %d", e.Seq)})
		if err != nil {
			return err
		}
		thief.ID, thief.SessionID, thief.Seq, thief.TS, thief.Actor = fmt.Sprintf("thief-%d", e.Seq), e.SessionID, e.Seq, e.TS, "tool/notes"
		if err := l.Log.Append(ctx, []messages.Envelope{thief}); err != nil {
			return err
		}
	}
	return l.Log.Append(ctx, events)
}

func TestConflictOnAppendIsRetried(t *testing.T) {
	ctx := tools.WithCallKey(testCtx(t), "s/1")
	log := &racingLog{Log: openLog(t, t.TempDir(), false), steals: 3}
	n := newNotes(t, notes.Config{Log: log})
	got, err := n.Add(ctx, "", nil, "Mine.")
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != "n4" || got.Body != "Mine." {
		t.Errorf("added %+v; want the note at seq 4, after the three stolen seqs", got)
	}
	all, _ := n.List(ctx, notes.Filter{})
	if all.Matched != 4 {
		t.Errorf("the stream holds %d notes, want 4 (3 of the other writer, 1 of this one)", all.Matched)
	}

	log.always = true
	_, err = n.Add(tools.WithCallKey(ctx, "s/2"), "", nil, "Never lands.")
	if !errors.Is(err, notes.ErrConflict) || errors.Is(err, tools.ErrInvalidArguments) {
		t.Errorf("a write that always loses its seq: %v; want ErrConflict, not the model's fault", err)
	}
}

func TestConcurrentWritersSharingALog(t *testing.T) {
	dir := t.TempDir()
	// Two logs on one directory, as two processes of one host (sqlite Shared): each
	// has its own writer, so their appends race for the stream's seqs. Two tool
	// calls at once share the first one's notes, as a node's parallel calls do.
	first := newNotes(t, notes.Config{Log: openLog(t, dir, true)})
	writers := []*notes.Notes{first, first, newNotes(t, notes.Config{Log: openLog(t, dir, true)})}
	// A write loses its seq only to another write, so with fewer writes in all than
	// MaxAttempts none can run out of attempts, however the scheduler orders them.
	const each = 6
	ctx := testCtx(t)
	var wg sync.WaitGroup
	errs := make(chan error, len(writers)*each)
	for w, n := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				key := fmt.Sprintf("w%d/%d", w, i+1)
				if _, err := n.Add(tools.WithCallKey(ctx, key), "", []string{fmt.Sprintf("w%d", w)}, "note "+key); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	reader := newNotes(t, notes.Config{Log: openLog(t, dir, true)})
	all, err := reader.List(ctx, notes.Filter{Limit: notes.MaxLimit})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, n := range all.Notes {
		if seen[n.Body] {
			t.Errorf("%q twice", n.Body)
		}
		seen[n.Body] = true
	}
	if all.Matched != len(writers)*each || len(seen) != len(writers)*each {
		t.Errorf("%d notes, %d distinct; want %d", all.Matched, len(seen), len(writers)*each)
	}
	events, err := openLog(t, dir, true).Read(ctx, notes.Stream("default"), 1)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range events {
		if e.Seq != uint64(i+1) || e.Type != messages.TypeNoteAdded {
			t.Fatalf("event %d: seq %d, %s; want seq %d, note.added: one event per note, gap-free", i, e.Seq, e.Type, i+1)
		}
	}
}

func TestHostileInput(t *testing.T) {
	box := toolbox(t, newNotes(t, notes.Config{Log: openLog(t, t.TempDir(), false), MaxBodyBytes: 100, MaxTags: 3, MaxNotes: 2}))
	tooMany := `["a","b","c","d"]`
	cases := map[string]struct {
		op, args string
		want     error
		says     string
	}{
		"huge body":       {"add", fmt.Sprintf(`{"body":%q}`, strings.Repeat("x", 101)), notes.ErrLimit, "101 bytes; the limit is 100"},
		"blank body":      {"add", `{"body":"   "}`, notes.ErrBadNote, "body is empty"},
		"tag with space":  {"add", `{"body":"x","tags":["two words"]}`, notes.ErrBadNote, `tag "two words" is not a word`},
		"empty tag":       {"add", `{"body":"x","tags":[""]}`, notes.ErrBadNote, `tag "" is not a word`},
		"long tag":        {"add", fmt.Sprintf(`{"body":"x","tags":[%q]}`, strings.Repeat("t", 33)), notes.ErrBadNote, "is not a word"},
		"control type":    {"add", `{"body":"x","type":"a\u0000b"}`, notes.ErrBadNote, "type"},
		"too many tags":   {"add", `{"body":"x","tags":` + tooMany + `}`, notes.ErrLimit, "4 tags; a note has at most 3"},
		"unknown id":      {"update", `{"id":"n999","body":"x"}`, notes.ErrUnknownNote, `no note has the id "n999"`},
		"remove unknown":  {"remove", `{"id":"n999"}`, notes.ErrUnknownNote, "list or search"},
		"huge unknown id": {"remove", fmt.Sprintf(`{"id":%q}`, strings.Repeat("n", 20000)), notes.ErrUnknownNote, `no note has the id "` + strings.Repeat("n", 48) + `…": list`},
		"empty update":    {"update", `{"id":"n1"}`, notes.ErrBadNote, "nothing to update"},
		"empty query":     {"search", `{"query":" "}`, notes.ErrBadNote, "query is empty"},
		"bad filter tag":  {"list", `{"tags":["a b"]}`, notes.ErrBadNote, "not a word"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := do(t, box, "k/"+name, c.op, c.args)
			if !errors.Is(err, c.want) || !errors.Is(err, tools.ErrInvalidArguments) || !strings.Contains(err.Error(), c.says) {
				t.Errorf("got %v; want %v, saying %q, for the model", err, c.want, c.says)
			}
		})
	}
	// A body far past every limit is refused before it is parsed.
	if _, err := do(t, box, "k/y", "add", fmt.Sprintf(`{"body":%q}`, strings.Repeat("x", 2<<20))); !errors.Is(err, tools.ErrInvalidArguments) || !strings.Contains(err.Error(), "limit") {
		t.Errorf("a 2 MiB body: %v", err)
	}
	// Malformed arguments never reach the notes: the schema refuses them.
	if _, err := do(t, box, "k/x", "add", `{"text":"misnamed"}`); !errors.Is(err, tools.ErrInvalidArguments) || !strings.Contains(err.Error(), "body") {
		t.Errorf("a misnamed body: %v", err)
	}
	// Nothing was written by any of them; the notes limit holds.
	mustDo(t, box, "k/1", "add", `{"body":"one"}`)
	mustDo(t, box, "k/2", "add", `{"body":"two"}`)
	if _, err := do(t, box, "k/3", "add", `{"body":"three"}`); !errors.Is(err, notes.ErrLimit) || !strings.Contains(err.Error(), "2 notes, the limit") {
		t.Errorf("a note past the limit: %v", err)
	}
	if got := decode[page](t, mustDo(t, box, "", "list", `{}`)); got.Matched != 2 || got.Notes[1].ID != "n1" {
		t.Errorf("after the refused calls: %+v; want the two notes at seqs 1 and 2", got)
	}
}

func TestConfigIsValidated(t *testing.T) {
	log := openLog(t, t.TempDir(), false)
	for name, cfg := range map[string]notes.Config{
		"no log":         {},
		"slash in agent": {Log: log, Agent: "a/b"},
		"negative limit": {Log: log, MaxNotes: -1},
	} {
		if _, err := notes.New(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if !notes.IsStream(notes.Stream("x")) || notes.IsStream("session-1") {
		t.Error("IsStream")
	}
}

// With writes refused (a replay fork's notes, which are the served node's), list
// and search read the notes as they are, and add, update and remove answer
// ErrWritesRefused with why, and change nothing; the operations and their schemas
// are those of a notebook that writes.
func TestWritesRefusedChangesNothing(t *testing.T) {
	dir := t.TempDir()
	log := openLog(t, dir, false)
	kept := decode[note](t, mustDo(t, toolbox(t, newNotes(t, notes.Config{Log: log})), "s/1", "add", `{"body":"The Louvre closes on Tuesdays."}`))
	ro := newNotes(t, notes.Config{Log: log, WritesRefused: "a fork"})
	box := toolbox(t, ro)
	for _, c := range []struct{ op, args string }{
		{"add", `{"body":"Book the train."}`},
		{"update", fmt.Sprintf(`{"id":%q,"body":"Open every day."}`, kept.ID)},
		{"remove", fmt.Sprintf(`{"id":%q}`, kept.ID)},
	} {
		if _, err := do(t, box, "s/2", c.op, c.args); !errors.Is(err, notes.ErrWritesRefused) || !strings.Contains(err.Error(), "a fork") {
			t.Errorf("%s with writes refused: %v, want ErrWritesRefused saying why", c.op, err)
		}
	}
	if got := decode[page](t, mustDo(t, box, "", "search", `{"query":"louvre"}`)); len(got.Notes) != 1 || got.Notes[0].Body != kept.Body {
		t.Errorf("search with writes refused: %+v, want the note as it was", got)
	}
	events, err := log.Read(testCtx(t), notes.Stream("default"), 1)
	if err != nil || len(events) != 1 {
		t.Errorf("the stream holds %d events (%v), want the one add", len(events), err)
	}
	writes := toolbox(t, newNotes(t, notes.Config{Log: log}))
	if a, b := writes.Spec(), box.Spec(); string(a.Parameters) != string(b.Parameters) || a.Description != b.Description {
		t.Error("the notes with writes refused offer another tool than those that write")
	}
}
