package consolidator_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/consolidator"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
)

// stallingModel answers its first `answers` calls with a fact and then blocks until
// the call's context ends, as a slow model does when the run is cut short (a kill, a
// run timeout).
type stallingModel struct {
	mu      sync.Mutex
	answers int
	calls   []string // the prompts, one a call
	stalled chan struct{}
}

func (m *stallingModel) Name() string { return "stalling" }

func (m *stallingModel) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	m.mu.Lock()
	m.calls = append(m.calls, req.Messages[len(req.Messages)-1].Content)
	n := len(m.calls)
	m.mu.Unlock()
	if n > m.answers {
		if m.stalled != nil {
			close(m.stalled)
			m.stalled = nil
		}
		<-ctx.Done()
		return llm.Response{}, ctx.Err()
	}
	return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: `{"fact": "a fact", "importance": 0.7}`}}, nil
}

func (m *stallingModel) prompts() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.calls...)
}

// twoClusters is two clusters of three episodes each (orthogonal to each other) and
// an old unimportant memory to forget.
func twoClusters() []memory.Memory {
	return append(episodes()[:3],
		withVector(mem("g1", memory.Episodic, 0.6, 3*day), 0, 0, 0, 1),
		withVector(mem("g2", memory.Episodic, 0.5, 2*day), 0, 0, 0.1, 1),
		withVector(mem("g3", memory.Episodic, 0.5, day), 0, 0.1, 0, 1),
		mem("old", memory.Episodic, 0.1, 40*day))
}

// A run cut short while the model writes its second fact (the node killed, the run
// past its timeout) keeps what it was answered: the first cluster's fact is in the
// namespace and the old memory is forgotten, so the run after it (under a key of its
// own, as after a restart) asks the model about the second cluster only. Before, a
// run applied nothing until every model call had answered: each cut-short run threw
// its answers away, and a namespace whose model calls outlast the run timeout asked
// the same questions every interval and never distilled anything.
func TestRunCutShortKeepsTheAnswersItGot(t *testing.T) {
	mems := twoClusters()
	for i := range mems[:3] { // episodes() has three dimensions; the clusters four
		mems[i].Vector = append(mems[i].Vector, 0)
	}
	f := newFake(mems...)
	p := only(consolidator.Policy{ClusterThreshold: 0.8, MinImportance: 0.2, MaxAge: map[memory.Tier]time.Duration{memory.Episodic: 30 * day}})
	stalled := make(chan struct{})
	first := &stallingModel{answers: 1, stalled: stalled}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := newConsolidator(t, first, p).Run(ctx, f, "run1")
		done <- err
	}()
	select {
	case <-stalled:
	case <-time.After(10 * time.Second):
		t.Fatal("the model was not asked a second time in 10 s")
	}
	cancel() // the kill
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cut-short run: err %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the run did not end in 10 s after its context was cancelled")
	}
	applied := f.appliedChanges()
	if len(applied) != 2 || !strings.HasPrefix(applied[0], "forget run1/") || !strings.HasPrefix(applied[1], "distill run1/") {
		t.Fatalf("the cut-short run applied %q, want the forget and the first distillation", applied)
	}

	// The next run (a restart: another key) asks about the second cluster only.
	second := &stallingModel{answers: 10}
	rep, err := newConsolidator(t, second, p).Run(context.Background(), f, "run2")
	if err != nil {
		t.Fatal(err)
	}
	asked := second.prompts()
	if len(asked) != 1 || !strings.Contains(asked[0], "content of g1") {
		t.Fatalf("the run after asked the model %d times, want once, about the g cluster:\n%s", len(asked), strings.Join(asked, "\n---\n"))
	}
	if rep.Distilled != 1 || rep.Forgotten != 0 {
		t.Errorf("the run after:\n%s", rep)
	}
	facts := 0
	for _, m := range f.Snapshot() {
		if m.Tier == memory.Semantic {
			facts++
		}
	}
	if facts != 2 {
		t.Errorf("%d distilled facts, want 2 (one a cluster)", facts)
	}
}
