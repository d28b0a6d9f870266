package node_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/tools/notes"
)

// routedPartition puts the memory namespaces, knowledge bases and notes in
// partition 1 of 2, and everything else (the sessions) in partition 0.
func routedPartition(key string, _ int) int {
	if memory.IsStream(key) || knowledge.IsStream(key) || notes.IsStream(key) {
		return 1
	}
	return 0
}

// keyedPartitions is an in-process subscriber whose messages are of their key's
// partition (routedPartition), as a sharded node's tasks subscriber must say.
type keyedPartitions struct{ message.Subscriber }

func (keyedPartitions) MessagePartition(msg *message.Message) (int, bool) {
	return routedPartition(msg.Metadata.Get(messages.MetaSessionID), 2), true
}

// streamLen returns how many events the log holds of stream.
func streamLen(t *testing.T, log eventlog.Log, stream string) int {
	t.Helper()
	events, err := log.Read(context.Background(), stream, 1)
	if err != nil {
		t.Fatal(err)
	}
	return len(events)
}

// TestRoutedStreamsAreFenced: node a owns both partitions, and writes a memory
// namespace, a knowledge base and its notes (partition 1). Another node takes
// partition 1 in the log while a still believes it owns it (a hung past the
// group's session timeout and woke): a's writes to those streams are refused with
// eventlog.ErrFenced and append nothing, and a memory command it reads from the
// bus is neither answered nor acknowledged (it is handled again, for the owner to
// run), while its sessions (partition 0, still its own) go on.
func TestRoutedStreamsAreFenced(t *testing.T) {
	ctx := context.Background()
	log := sharedLog(t)
	bus := node.NewEmbeddedBus(watermill.NopLogger{})
	t.Cleanup(func() { _ = bus.Close() })
	// HandoffGrace: s-2's notes call is never answered (its command is fenced),
	// and Close cuts it at the test's end after the grace: 100 ms, not the default 5 s.
	a, err := node.New(ctx, node.Config{
		Log: log, NodeID: "a", DataDir: t.TempDir(), Model: notesAgent{}, HandoffGrace: 100 * time.Millisecond,
		Memory: &memory.Config{}, Knowledge: &knowledge.Config{}, Notes: &notes.Config{},
		Bus: &node.Bus{Publisher: bus, Tasks: keyedPartitions{bus}, Live: bus, Sharded: true, Partition: routedPartition},
	})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := a.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	a.Assigned([]int{0, 1}, 2)
	waitFor(t, 30*time.Second, "node a takes its lease", func() bool { return metric(t, a, "troupe_cluster_ownership_epoch") > 0 })

	// The owner writes its streams.
	req := httptest.NewRequest("POST", "/v1/memories", strings.NewReader(`{"namespace":"x","tier":"semantic","content":"the sky is blue"}`))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	a.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusCreated {
		t.Fatalf("the owner's memory write: HTTP %d: %s", rec.Code, rec.Body)
	}
	kb, err := a.Knowledge().Base(ctx, "docs")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kb.AddText(ctx, "a.md", "# A\n\nThe first document.", "k-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Submit(ctx, node.Task{Input: "first note", SessionID: "s-1"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the first note's session completes", func() bool {
		st, ok, err := a.Status(ctx, "s-1")
		return err == nil && ok && st.Status == messages.StatusCompleted
	})
	mem, kbs, nts := streamLen(t, log, memory.Stream("x")), streamLen(t, log, knowledge.Stream("docs")), streamLen(t, log, notes.Stream("default"))
	if mem == 0 || kbs == 0 || nts == 0 {
		t.Fatalf("the owner's writes: %d memory events, %d knowledge events, %d notes events", mem, kbs, nts)
	}

	// Another node takes partition 1; a does not know.
	if _, err := log.(eventlog.Fencing).Own(ctx, "b", []int{1}); err != nil {
		t.Fatal(err)
	}
	ns, err := a.Memories().Namespace(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Add(ctx, "k-2", []memory.AddRequest{{Tier: memory.Semantic, Content: "the grass is green"}}); !errors.Is(err, eventlog.ErrFenced) {
		t.Errorf("a stale owner's memory add: %v, want ErrFenced", err)
	}
	if _, err := kb.AddText(ctx, "b.md", "# B\n\nThe second document.", "k-b"); !errors.Is(err, eventlog.ErrFenced) {
		t.Errorf("a stale owner's knowledge add: %v, want ErrFenced", err)
	}
	if err := kb.Remove(ctx, "a.md", "k-rm"); !errors.Is(err, eventlog.ErrFenced) {
		t.Errorf("a stale owner's knowledge removal: %v, want ErrFenced", err)
	}

	// A change that travels on the bus: the notes tool's, from a session of
	// partition 0 (still a's). Its command is refused each time a handles it, and
	// neither answered nor acknowledged, so that the partition's owner runs it:
	// the in-process bus delivers it again (and holds its publisher meanwhile);
	// Kafka leaves it to the new owner, from the group's committed offset.
	before := metric(t, a, "troupe_cluster_fenced_appends_total")
	if _, err := a.Submit(ctx, node.Task{Input: "second note", SessionID: "s-2"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the fenced notes command is handled again", func() bool {
		return metric(t, a, "troupe_cluster_fenced_appends_total") >= before+2
	})

	if got := streamLen(t, log, memory.Stream("x")); got != mem {
		t.Errorf("the memory stream holds %d events, want the owner's %d", got, mem)
	}
	if got := streamLen(t, log, knowledge.Stream("docs")); got != kbs {
		t.Errorf("the knowledge stream holds %d events, want the owner's %d", got, kbs)
	}
	if got := streamLen(t, log, notes.Stream("default")); got != nts {
		t.Errorf("the notes stream holds %d events, want the owner's %d", got, nts)
	}
}

// The write after task of a session whose agent's namespace is another node's is
// made by the namespace's owner: the session's node, which holds no lease of the
// namespace's partition, would have its Remember fenced, and the task would not be
// remembered.
func TestWriteAfterTaskRunsOnTheNamespaceOwner(t *testing.T) {
	k := newKafkaEnv(t)
	group := uniqueGroup(t)
	shared := sharedLog(t)
	const namespace = "agent:a"
	withMemory := func(c *node.Config) {
		c.Log = shared // the log itself, which fences (not a counting wrapper)
		c.Model = script(t, llm.ScriptStep{Content: "Noted."})
		c.MemoryTool = &memory.ToolConfig{Namespace: namespace}
		c.MemoryWriteAfterTask = true
	}
	a := startMemoryClusterNode(t, k, group, shared, "a", withMemory)
	b := startMemoryClusterNode(t, k, group, shared, "b", withMemory)
	waitPartitionsSplit(t, a.n, b.n)
	owner, other := a, b
	if !a.parts.owns(kafka.PartitionOf(memory.Stream(namespace), memoryClusterPartitions)) {
		owner, other = b, a
	}
	session := sessionsOn(t, other, "remember", 1)[0]
	if _, err := other.n.Submit(context.Background(), node.Task{Input: "I live in Oslo and I like tea.", SessionID: session}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the task is remembered", func() bool {
		return streamLen(t, shared, memory.Stream(namespace)) > 0
	})
	if n := metric(t, other.n, "troupe_cluster_fenced_appends_total"); n != 0 {
		t.Errorf("the session's node had %d appends fenced", n)
	}
	ns, err := owner.n.Memories().Namespace(context.Background(), namespace)
	if err != nil {
		t.Fatal(err)
	}
	if err := ns.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for _, m := range ns.Snapshot() {
		text.WriteString(m.Content + "\n")
		if len(m.Sources) != 1 || m.Sources[0].ID != session {
			t.Errorf("memory %s: sources %+v, want the session %s", m.ID, m.Sources, session)
		}
	}
	if !strings.Contains(text.String(), "Oslo") {
		t.Fatalf("remembered:\n%s", text.String())
	}
}
