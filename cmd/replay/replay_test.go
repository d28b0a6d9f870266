package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools/notes"
	"github.com/troupe-run/troupe/vectorstore"
)

// exportedSession records a task's session in a new data directory and exports
// it: the directory, the session's ID, the export's path and its bytes.
func exportedSession(t *testing.T) (src, id, file string, b []byte) {
	t.Helper()
	src = t.TempDir()
	id = recordSession(t, src, "What is 12 * (7 + 5)?")
	file = filepath.Join(t.TempDir(), "s.jsonl")
	if code, _, errs := replay(t, "export", id, "--data", src, "--out", file); code != 0 {
		t.Fatal(errs)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return src, id, file, b
}

// recordSession runs one task on an embedded node in dir and returns its session ID.
func recordSession(t *testing.T, dir, input string) string {
	t.Helper()
	n, err := node.New(context.Background(), node.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := n.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	id := fmt.Sprintf("rec-%d", time.Now().UnixNano())
	nodetest.Run(t, n, id, input)
	return id
}

func replay(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestListAndShow(t *testing.T) {
	dir := t.TempDir()
	id := recordSession(t, dir, "What is 12 * (7 + 5)?")

	code, out, errs := replay(t, "list", "--data", dir)
	if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "completed") {
		t.Fatalf("list: %d\n%s\n%s", code, out, errs)
	}
	code, out, errs = replay(t, "list", "--data", dir, "--json")
	var infos []eventlog.SessionInfo
	// The session and the stream of its agent's configuration (config/<digest>).
	if code != 0 || json.Unmarshal([]byte(out), &infos) != nil || len(infos) != 2 {
		t.Fatalf("list --json: %d %s %s", code, out, errs)
	}
	for _, info := range infos {
		if info.ID == id && info.Steps != 2 || info.ID != id && (info.Status != node.ConfigStatus || !strings.HasPrefix(info.ID, messages.ConfigStreamPrefix)) {
			t.Fatalf("list --json: %d %s %s", code, out, errs)
		}
	}

	code, out, errs = replay(t, "show", id, "--data", dir)
	if code != 0 {
		t.Fatalf("show: %d %s", code, errs)
	}
	for _, want := range []string{"task.submitted", "calculator(", "calculator → 144", "completed: 144", "tokens"} {
		if !strings.Contains(out, want) {
			t.Fatalf("show output lacks %q:\n%s", want, out)
		}
	}
	// The tool result is nested under its request, which is nested under the model's reply.
	lines := strings.Split(out, "\n")
	indent := func(sub string) int {
		for _, l := range lines {
			if strings.Contains(l, sub) {
				return len(l) - len(strings.TrimLeft(l[6:], " "))
			}
		}
		t.Fatalf("no line with %q", sub)
		return 0
	}
	if !(indent("tool.requested") > indent("model.responded") && indent("tool.completed") > indent("tool.requested")) {
		t.Fatalf("timeline not nested by causation:\n%s", out)
	}

	code, out, _ = replay(t, "show", "--json", "--data", dir, id)
	var tl Timeline
	if code != 0 || json.Unmarshal([]byte(out), &tl) != nil || tl.Events != 8 || tl.Status != messages.StatusCompleted {
		t.Fatalf("show --json: %d %s", code, out)
	}
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	recordSession(t, dir, "echo hi")
	if code, _, errs := replay(t, "show", "missing", "--data", dir); code != 1 || !strings.Contains(errs, `no session "missing"`) {
		t.Fatalf("unknown session: %d %s", code, errs)
	}
	if code, _, errs := replay(t, "list", "--data", t.TempDir()+"/nowhere"); code != 1 || !strings.Contains(errs, "no event log") {
		t.Fatalf("missing log: %d %s", code, errs)
	}
	if code, _, _ := replay(t, "frobnicate"); code != 2 {
		t.Fatalf("unknown command: %d", code)
	}
	if code, _, _ := replay(t, "show", "--data", dir); code != 2 {
		t.Fatalf("show without an ID: %d", code)
	}
}

// A long session renders without recursion trouble and in one pass.
func TestTimelineOfALongSession(t *testing.T) {
	var events []messages.Envelope
	add := func(p messages.Payload, cause string) string {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		seq := uint64(len(events) + 1)
		e.ID, e.SessionID, e.Seq, e.CausationID, e.TS, e.Actor = fmt.Sprintf("long/%d", seq), "long", seq, cause, int64(seq)*10, "session"
		events = append(events, e)
		return e.ID
	}
	task := add(&messages.TaskSubmitted{Input: "loop"}, "")
	for len(events) < 10000 {
		req := add(&messages.ModelRequested{Key: "k", Model: "m", Step: len(events)}, task)
		resp := add(&messages.ModelResponded{Key: "k", Model: "m", Message: messages.ChatMessage{Role: messages.RoleAssistant, ToolCalls: []messages.ToolCall{{ID: "c", Name: "calculator"}}}}, req)
		call := add(&messages.ToolCallRequested{Key: "t", CallID: "c", Tool: "calculator", Arguments: "{}"}, resp)
		add(&messages.ToolCallCompleted{Key: "t", CallID: "c", Tool: "calculator", Result: "1"}, call)
	}
	tl, err := BuildTimeline(events)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	tl.Render(&out)
	if got := strings.Count(out.String(), "\n"); got != len(events)+1 {
		t.Fatalf("%d lines for %d events", got, len(events))
	}
}

// A session with tasks queued behind an ended one is running until its last task
// ends, like the log lists it.
func TestTimelineStatusWithQueuedTasks(t *testing.T) {
	var events []messages.Envelope
	add := func(p messages.Payload) {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		seq := uint64(len(events) + 1)
		e.ID, e.SessionID, e.Seq, e.TS, e.Actor = fmt.Sprintf("q/%d", seq), "q", seq, int64(seq), "session"
		events = append(events, e)
	}
	status := func() string {
		t.Helper()
		tl, err := BuildTimeline(events)
		if err != nil {
			t.Fatal(err)
		}
		return tl.Status
	}
	add(&messages.TaskSubmitted{Input: "one"})
	add(&messages.TaskSubmitted{Input: "two"})
	add(&messages.TaskCompleted{Output: "1"})
	if got := status(); got != messages.StatusRunning {
		t.Fatalf("task two queued: status %s, want running", got)
	}
	add(&messages.TaskFailed{Reason: messages.ReasonModelError, Error: "down"})
	if got := status(); got != messages.StatusFailed {
		t.Fatalf("both ended: status %s, want failed", got)
	}
}

func BenchmarkTimeline10k(b *testing.B) {
	var events []messages.Envelope
	for i := 1; i <= 10000; i++ {
		e, _ := messages.NewEnvelope(&messages.ToolCallCompleted{Key: "t", CallID: "c", Tool: "calculator", Result: "1", LatencyUS: 5})
		e.ID, e.SessionID, e.Seq, e.CausationID, e.TS = fmt.Sprintf("s/%d", i), "s", uint64(i), fmt.Sprintf("s/%d", max(1, i/4*4)), int64(i)
		events = append(events, e)
	}
	for b.Loop() {
		tl, err := BuildTimeline(events)
		if err != nil {
			b.Fatal(err)
		}
		var out bytes.Buffer
		tl.Render(&out)
	}
}

// An agent's notes are a stream of the log but no session: list shows it with the
// status notes, and show prints its events under that status.
func TestListMarksNotesStreams(t *testing.T) {
	dir := t.TempDir()
	id := recordSession(t, dir, "echo hi")
	log, err := sqlite.Open(context.Background(), sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	n, err := notes.New(notes.Config{Log: log, Agent: "planner"})
	if err == nil {
		_, err = n.Add(context.Background(), "fact", []string{"x"}, "A note.")
	}
	if err == nil { // a memory namespace is no session either
		var mem *memory.Memories
		vs, _ := vectorstore.Open(vectorstore.Config{}) // in memory: a config without a path cannot fail
		if mem, err = memory.Open(memory.Config{Log: log, Vectors: vs}); err == nil {
			var ns *memory.Namespace
			if ns, err = mem.Namespace(context.Background(), "user:alice"); err == nil {
				_, err = ns.Add(context.Background(), "", []memory.AddRequest{{Tier: memory.Semantic, Content: "Alice likes tea."}})
			}
		}
	}
	if err == nil { // nor is a knowledge base
		var kb *knowledge.Bases
		vs, _ := vectorstore.Open(vectorstore.Config{})
		if kb, err = knowledge.Open(knowledge.Config{Log: log, Vectors: vs}); err == nil {
			var b *knowledge.Base
			if b, err = kb.Base(context.Background(), "handbook"); err == nil {
				_, err = b.AddText(context.Background(), "docs/tea.md", "# Tea\n\nAlice likes tea.", "")
			}
		}
	}
	if cerr := log.Close(); err != nil || cerr != nil {
		t.Fatal(err, cerr)
	}

	code, out, errs := replay(t, "list", "--data", dir)
	if code != 0 || !regexp.MustCompile(`\nnotes/planner +notes +0 +1 `).MatchString(out) || !regexp.MustCompile(`\n`+id+` +completed `).MatchString(out) ||
		!regexp.MustCompile(`\nmemory/user:alice +memory +0 +1 `).MatchString(out) || !regexp.MustCompile(`\nkb/handbook +kb +0 +1 `).MatchString(out) {
		t.Fatalf("list: %d\n%s%s", code, out, errs)
	}
	code, out, errs = replay(t, "list", "--data", dir, "--json")
	var infos []eventlog.SessionInfo
	if code != 0 || json.Unmarshal([]byte(out), &infos) != nil || len(infos) != 5 {
		t.Fatalf("list --json: %d %s %s", code, out, errs)
	}
	want := map[string]string{"notes/planner": notes.Status, "memory/user:alice": memory.Status, "kb/handbook": knowledge.Status, id: messages.StatusCompleted}
	for _, info := range infos {
		if strings.HasPrefix(info.ID, messages.ConfigStreamPrefix) {
			want[info.ID] = node.ConfigStatus
		}
		if info.Status != want[info.ID] {
			t.Errorf("%s: status %s, want %s", info.ID, info.Status, want[info.ID])
		}
	}
	code, out, errs = replay(t, "show", "notes/planner", "--data", dir)
	if code != 0 || !strings.Contains(out, "notes/planner  notes  1 events") || !strings.Contains(out, "note.added") {
		t.Fatalf("show: %d\n%s%s", code, out, errs)
	}
	code, out, errs = replay(t, "show", "kb/handbook", "--data", dir)
	if code != 0 || !strings.Contains(out, "kb/handbook  kb  1 events") || !strings.Contains(out, "document docs/tea.md ingested") ||
		!strings.Contains(out, "1 chunks") {
		t.Fatalf("show kb: %d\n%s%s", code, out, errs)
	}
}

// A session whose agent kept notes verifies against the agent of the same
// configuration: --config brings the notes tool's schema back into its prompts.
func TestVerifyASessionWithNotes(t *testing.T) {
	dir := t.TempDir()
	model, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "notes", Arguments: `{"op":"add","args":{"tags":["x"],"body":"Remember this."}}`}}},
		{Content: "noted"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.New(context.Background(), node.Config{DataDir: dir, Model: model, Notes: &notes.Config{MaxTags: 4}})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := n.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	nodetest.Run(t, n, "with-notes", "remember this")
	stop()

	cfg := filepath.Join(t.TempDir(), "troupe.json")
	if err := os.WriteFile(cfg, []byte(`{"tools": {"notes": {"max_tags": 4}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := replay(t, "verify", "with-notes", "--data", dir, "--config", cfg); code != 0 || !strings.Contains(out, "deterministic") {
		t.Fatalf("verify --config: %d\n%s%s", code, out, errs)
	}
	// Without the configuration the agent has no notes tool, and its first prompt
	// differs from the recorded one.
	if code, out, _ := replay(t, "verify", "with-notes", "--data", dir); code != 1 || !strings.Contains(out, "diverges at seq 2") {
		t.Fatalf("verify without --config: %d\n%s", code, out)
	}
	bad := filepath.Join(t.TempDir(), "troupe.json")
	if err := os.WriteFile(bad, []byte(`{"tools": {"notes": {"max_tags": -1}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := replay(t, "verify", "with-notes", "--data", dir, "--config", bad); code != 2 || !strings.Contains(errs, "tools.notes") {
		t.Fatalf("verify with a bad notes section: %d %s", code, errs)
	}
}

// recordTasks runs tasks one after the other on a node of cfg (closed before it
// returns) and returns the last event of each: task.completed or task.failed. seen,
// when set, sees every event of the tasks' sessions as it comes.
func recordTasks(t testing.TB, cfg node.Config, seen func(messages.Envelope), tasks ...node.Task) []messages.Envelope {
	t.Helper()
	ctx := context.Background()
	n, err := node.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	stop, err := n.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	var ends []messages.Envelope
	for _, task := range tasks {
		live, stopWatch := n.Watch(task.SessionID)
		if _, err := n.Submit(ctx, task); err != nil {
			stopWatch()
			t.Fatal(err)
		}
		var last messages.Envelope
		for timeout := time.After(10 * time.Second); last.Type != messages.TypeTaskCompleted && last.Type != messages.TypeTaskFailed; {
			select {
			case last = <-live:
				if seen != nil {
					seen(last)
				}
			case <-timeout:
				stopWatch()
				t.Fatalf("task %q did not finish in 10 s", task.Input)
			}
		}
		stopWatch()
		ends = append(ends, last)
	}
	return ends
}

// TestListSaysWhenCut: list shows at most --limit sessions, and says on stderr
// when the log holds more, so a user does not take the first page for all.
func TestListSaysWhenCut(t *testing.T) {
	dir := t.TempDir()
	n, err := node.New(context.Background(), node.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := n.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		nodetest.Run(t, n, fmt.Sprintf("cut-%d", i), "What is 2 + 2?")
	}
	stop()

	code, out, errs := replay(t, "list", "--data", dir, "--limit", "2")
	if code != 0 || strings.Count(out, "cut-") != 2 || !strings.Contains(errs, "the 2 most recently started sessions only") {
		t.Fatalf("list --limit 2 of 3: %d\n%s\n%s", code, out, errs)
	}
	// The three sessions and their agent's configuration's stream.
	code, out, errs = replay(t, "list", "--data", dir, "--limit", "4", "--json")
	var infos []eventlog.SessionInfo
	if code != 0 || json.Unmarshal([]byte(out), &infos) != nil || len(infos) != 4 || errs != "" {
		t.Fatalf("list --limit 4 of 4: %d\n%s\n%s", code, out, errs)
	}
	code, out, errs = replay(t, "list", "--data", dir, "--limit", "0")
	if code != 0 || strings.Count(out, "cut-") != 3 || errs != "" {
		t.Fatalf("list --limit 0: %d\n%s\n%s", code, out, errs)
	}
	if code, _, errs := replay(t, "list", "--data", dir, "--limit", "-1"); code != 2 || !strings.Contains(errs, "--limit") {
		t.Fatalf("list --limit -1: %d %s", code, errs)
	}
}

// TestWriteToAServedLogSaysStopTheNodes: fork and import of an embedded log that
// the nodes of a cluster hold (opened shared, as node serve --kafka opens it) are
// refused with what to do in replay's terms, not the event log's Go API.
func TestWriteToAServedLogSaysStopTheNodes(t *testing.T) {
	dir := t.TempDir()
	id := recordSession(t, dir, "What is 12 * (7 + 5)?")
	held, err := sqlite.Open(context.Background(), sqlite.Config{Dir: dir, Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()

	other := t.TempDir()
	exported := filepath.Join(other, "s.jsonl")
	if code, _, errs := replay(t, "export", id, "--data", dir, "--out", exported); code != 0 {
		t.Fatalf("export while held: %d %s", code, errs)
	}
	for _, args := range [][]string{
		{"fork", id, "--at", "3", "--data", dir, "--model", "offline"},
		{"import", exported, "--data", dir},
	} {
		code, _, errs := replay(t, args...)
		if code != 1 || !strings.Contains(errs, "stop the nodes that serve it first") || strings.Contains(errs, "Config.Shared") {
			t.Fatalf("%s while a node holds the log: %d %s", args[0], code, errs)
		}
	}
}
