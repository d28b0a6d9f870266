package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	kgo "github.com/segmentio/kafka-go"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/clickhouse"
	"github.com/troupe-run/troupe/eventlog/clickhouse/chtest"
	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/tools/notes"
)

// notesAgent adds a note whose body is its task's input (none for the input
// "empty": an add the tool refuses), then answers.
type notesAgent struct{}

func (notesAgent) Name() string { return "notes-agent" }

func (notesAgent) Generate(ctx context.Context, r llm.Request) (llm.Response, error) {
	input := ""
	for _, m := range r.Messages {
		if m.Role == messages.RoleUser {
			input = m.Content
		}
	}
	msg := messages.ChatMessage{Role: messages.RoleAssistant}
	if r.Step == 1 {
		body := input
		if input == "empty" {
			body = ""
		}
		args, err := json.Marshal(map[string]any{"op": "add", "args": map[string]any{"type": "fact", "tags": []string{"cluster"}, "body": body}})
		if err != nil {
			return llm.Response{}, err
		}
		msg.ToolCalls = []messages.ToolCall{{ID: "n1", Name: "notes", Arguments: string(args)}}
	} else {
		msg.Content = "noted"
	}
	return llm.Response{Message: msg}, nil
}

// sessionsOn returns n session IDs with prefix whose partitions the node owns.
func sessionsOn(t *testing.T, owner memoryClusterNode, prefix string, n int) []string {
	t.Helper()
	var out []string
	for i := 0; len(out) < n && i < 10000; i++ {
		if id := fmt.Sprintf("%s-%d", prefix, i); owner.parts.owns(kafka.PartitionOf(id, memoryClusterPartitions)) {
			out = append(out, id)
		}
	}
	if len(out) < n {
		t.Fatalf("%d of %d sessions fall on the node's partitions", len(out), n)
	}
	return out
}

// The agent's notes are written by the owner of the notes stream's partition alone,
// whichever node runs the session: sessions on both nodes add notes at once, the
// other node appends nothing to the stream, and the stream holds every note once,
// at seqs 1..n. On ClickHouse, which cannot refuse a second event at one seq, two
// writers lost notes this way; SQLite refused the seq and hid it.
func TestNotesClusterChangesRunOnTheStreamOwner(t *testing.T) {
	shared := sharedLog(t)
	testNotesOnTheStreamOwner(t, func() eventlog.Log { return shared }, shared)
}

// The same on a ClickHouse log of each node's own (as separate processes have),
// on one database.
func TestNotesClusterChangesRunOnTheStreamOwnerClickHouse(t *testing.T) {
	addr := os.Getenv("TROUPE_TEST_CLICKHOUSE")
	if addr == "" {
		t.Skip("TROUPE_TEST_CLICKHOUSE is not set")
	}
	db := chtest.Database(t, addr, "troupe_notes_")
	open := func() eventlog.Log {
		l, err := clickhouse.Open(context.Background(), clickhouse.Config{Addr: clickhouse.SplitAddr(addr), Database: db})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	testNotesOnTheStreamOwner(t, open, open())
}

func testNotesOnTheStreamOwner(t *testing.T, logOf func() eventlog.Log, reader eventlog.Log) {
	k := newKafkaEnv(t)
	group := uniqueGroup(t)
	withNotes := func(c *node.Config) {
		c.Model = notesAgent{}
		c.Notes = &notes.Config{}
	}
	a := startMemoryClusterNode(t, k, group, logOf(), "a", withNotes)
	b := startMemoryClusterNode(t, k, group, logOf(), "b", withNotes)
	waitPartitionsSplit(t, a.n, b.n)
	stream := notes.Stream("default")
	owner, other := a, b
	if !a.parts.owns(kafka.PartitionOf(stream, memoryClusterPartitions)) {
		owner, other = b, a
	}

	const each = 12
	onOwner, onOther := sessionsOn(t, owner, "owner", each), sessionsOn(t, other, "other", each+1)
	refused := onOther[each]
	onOther = onOther[:each]
	var wg sync.WaitGroup
	submit := func(n *node.Node, session, input string) {
		defer wg.Done()
		if _, err := n.Submit(context.Background(), node.Task{Input: input, SessionID: session}); err != nil {
			t.Error(err)
		}
	}
	for i := range each {
		wg.Add(2)
		go submit(owner.n, onOwner[i], "note from "+onOwner[i])
		go submit(other.n, onOther[i], "note from "+onOther[i])
	}
	wg.Add(1)
	go submit(other.n, refused, "empty")
	wg.Wait()
	waitCompleted(t, owner.n, onOwner, 60*time.Second)
	waitCompleted(t, other.n, append(onOther, refused), 60*time.Second)

	if got := other.log.notesAppends(); got != 0 {
		t.Errorf("the node that does not own the notes stream appended to it %d times", got)
	}
	if got := owner.log.notesAppends(); got < 1 || got > 2*each {
		t.Errorf("the stream's owner appended %d times for %d notes; want at most one each (notes added at once share one)", got, 2*each)
	}
	events, err := reader.Read(context.Background(), stream, 1)
	if err != nil {
		t.Fatal(err)
	}
	bodies := map[string]int{}
	for i, e := range events {
		if e.Seq != uint64(i+1) {
			t.Errorf("event %d of the stream is at seq %d", i, e.Seq)
		}
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		added, ok := p.(*messages.NoteAdded)
		if !ok {
			t.Fatalf("event %d is a %s", i, e.Type)
		}
		bodies[added.Body]++
	}
	for _, s := range append(onOwner, onOther...) {
		if bodies["note from "+s] != 1 {
			t.Errorf("the note of session %s is in the stream %d times", s, bodies["note from "+s])
		}
	}
	if len(events) != 2*each {
		t.Errorf("the stream holds %d events; want %d", len(events), 2*each)
	}

	// Each session's tool result is its note, as the owner added it; the empty
	// body is refused by the owner and reaches the model as the arguments' fault.
	for _, s := range onOther {
		evs, err := reader.Read(context.Background(), s, 1)
		if err != nil {
			t.Fatal(err)
		}
		if res := answers(evs); len(res) != 1 || !strings.Contains(res[0], "note from "+s) {
			t.Errorf("session %s: tool results %q", s, res)
		}
	}
	evs, err := reader.Read(context.Background(), refused, 1)
	if err != nil {
		t.Fatal(err)
	}
	if res := answers(evs); len(res) != 1 || !strings.Contains(res[0], "invalid arguments") {
		t.Errorf("an add without a body: %q; want the arguments' fault", res)
	}
}

// gatedNotesLog holds the first append to a notes stream until open is closed.
type gatedNotesLog struct {
	eventlog.Log
	once sync.Once
	open chan struct{}
}

func (l *gatedNotesLog) Append(ctx context.Context, events []messages.Envelope) error {
	if len(events) > 0 && notes.IsStream(events[0].SessionID) {
		l.once.Do(func() { <-l.open })
	}
	return l.Log.Append(ctx, events)
}

// stepOneCounter is notesAgent counting the first steps it answered.
type stepOneCounter struct {
	notesAgent
	mu sync.Mutex
	n  int
}

func (m *stepOneCounter) Generate(ctx context.Context, r llm.Request) (llm.Response, error) {
	if r.Step == 1 {
		m.mu.Lock()
		m.n++
		m.mu.Unlock()
	}
	return m.notesAgent.Generate(ctx, r)
}

func (m *stepOneCounter) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n
}

// Many sessions on one node add notes at once to the stream another node owns: the
// owner takes their commands together and appends them in a few Appends, and every
// session's note is in the stream once, where its tool result says. Before, the
// owner ran one stream's commands one after another, an Append each (100 for 100),
// which on ClickHouse under load made the calls wait past the tool timeout.
func TestNotesClusterManyCallsToOneStream(t *testing.T) {
	shared := sharedLog(t)
	gated := &gatedNotesLog{Log: shared, open: make(chan struct{})}
	k := newKafkaEnv(t)
	group := uniqueGroup(t)
	model := &stepOneCounter{}
	withNotes := func(c *node.Config) {
		c.Model = model
		c.Notes = &notes.Config{}
	}
	a := startMemoryClusterNode(t, k, group, gated, "a", withNotes)
	b := startMemoryClusterNode(t, k, group, gated, "b", withNotes)
	waitPartitionsSplit(t, a.n, b.n)
	stream := notes.Stream("default")
	owner, other := a, b
	if !a.parts.owns(kafka.PartitionOf(stream, memoryClusterPartitions)) {
		owner, other = b, a
	}
	const calls = 100
	sessions := sessionsOn(t, other, "many", calls)
	var wg sync.WaitGroup
	for _, s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := other.n.Submit(context.Background(), node.Task{Input: "note from " + s, SessionID: s}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	// The owner's first append waits until every session made its call: the calls
	// queue behind it (a hang guard, not a timing).
	waitFor(t, 60*time.Second, "every session calls the notes tool", func() bool { return model.count() >= calls })
	close(gated.open)
	waitCompleted(t, other.n, sessions, 120*time.Second)

	appends := owner.log.notesAppends()
	if other.log.notesAppends() != 0 {
		t.Errorf("the node that does not own the notes stream appended to it")
	}
	if appends >= calls {
		t.Errorf("the stream's owner made %d Appends for %d notes called at once; want some of them grouped (one each was the defect)", appends, calls)
	}
	events, err := shared.Read(context.Background(), stream, 1)
	if err != nil {
		t.Fatal(err)
	}
	bodies, keys, ids := map[string]int{}, map[string]bool{}, map[string]string{}
	for i, e := range events {
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		added, ok := p.(*messages.NoteAdded)
		if !ok || e.Seq != uint64(i+1) {
			t.Fatalf("event %d: a %s at seq %d", i, e.Type, e.Seq)
		}
		if keys[added.Key] {
			t.Errorf("key %s is in the stream twice", added.Key)
		}
		keys[added.Key] = true
		bodies[added.Body]++
		ids[added.Body] = added.NoteID
	}
	if len(events) != calls {
		t.Errorf("the stream holds %d notes; want %d", len(events), calls)
	}
	for _, s := range sessions {
		body := "note from " + s
		if bodies[body] != 1 {
			t.Errorf("the note of session %s is in the stream %d times", s, bodies[body])
			continue
		}
		evs, err := shared.Read(context.Background(), s, 1)
		if err != nil {
			t.Fatal(err)
		}
		if res := answers(evs); len(res) != 1 || !strings.Contains(res[0], body) || !strings.Contains(res[0], `"`+ids[body]+`"`) {
			t.Errorf("session %s: tool results %q; want its note %s", s, res, ids[body])
		}
	}
	t.Logf("%d notes called at once: %d Appends", calls, appends)
}

// A memory command the owner cannot read (here one of a later build's version) is
// answered with why, on the reply topic the asker waits on, besides going to the
// poison topic: the asker does not wait out its timeout.
func TestMemoryCommandRefusedIsAnswered(t *testing.T) {
	k := newKafkaEnv(t)
	k.nodeWith(t, node.Config{})
	ns := "refused-" + time.Now().Format("150405.000000")
	w := k.writer(t, messages.TopicTasks)
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := `{"v":99,"id":"cmd-` + ns + `","session_id":"memory/` + ns + `","namespace":"` + ns + `","action":"add","reply_topic":"` +
		messages.TopicReplies + `","reply_node":"elsewhere"}`
	if err := w.WriteMessages(ctx, kgo.Message{Key: []byte("memory/" + ns), Value: []byte(cmd),
		Headers: []kgo.Header{{Key: messages.MetaType, Value: []byte(messages.TypeMemoryCommand)}}}); err != nil {
		t.Fatal(err)
	}
	m := findRecord(t, k, messages.TopicReplies, "memory/"+ns)
	rep, err := messages.DecodeMemoryReply(m.Value)
	if err != nil {
		t.Fatal(err)
	}
	if rep.ID != "cmd-"+ns || rep.Kind != "invalid" || !strings.Contains(rep.Error, "this build reads up to") {
		t.Errorf("the reply: %+v", rep)
	}
}

// A cluster whose nodes have the notes tool and neither agent memory nor knowledge
// bases: a change travels to the stream's owner, and its answer comes back. The
// nodes did not read troupe.replies, where the owner answers: the change was
// written, and the call waited for its answer until it timed out.
func TestNotesClusterWithoutMemoryIsAnswered(t *testing.T) {
	k := newKafkaEnv(t)
	group := uniqueGroup(t)
	shared := sharedLog(t)
	withNotes := func(c *node.Config) {
		c.Model, c.Memory, c.Notes = notesAgent{}, nil, &notes.Config{}
	}
	a := startMemoryClusterNode(t, k, group, shared, "a", withNotes)
	b := startMemoryClusterNode(t, k, group, shared, "b", withNotes)
	waitPartitionsSplit(t, a.n, b.n)
	for i, owner := range []memoryClusterNode{a, b} {
		session := sessionsOn(t, owner, fmt.Sprintf("plain-notes-%d", i), 1)[0]
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		res, err := owner.n.RunTask(ctx, node.Task{Input: "fact of " + session, SessionID: session})
		cancel()
		if err != nil || res.Status != messages.StatusCompleted || res.Output != "noted" {
			t.Fatalf("session %s: %+v %v", session, res, err)
		}
	}
	if got := payloads[*messages.NoteAdded](t, readAll(t, shared, "notes/default")); len(got) != 2 {
		t.Errorf("%d notes added, want 2", len(got))
	}
}
