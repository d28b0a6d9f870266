package consolidator_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/consolidator"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
)

// oneHungQuestion answers every question at once but the one whose prompt holds
// hang, which it never answers (its context ends first): a model (or a provider's
// route) that stalls on one prompt, past the run's timeout, every time it is asked.
type oneHungQuestion struct {
	hang  string
	mu    sync.Mutex
	asked []string
	hung  chan struct{} // gets a value each time the hung question is asked
}

func (m *oneHungQuestion) Name() string { return "hung-on-one" }

func (m *oneHungQuestion) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	p := req.Messages[len(req.Messages)-1].Content
	m.mu.Lock()
	m.asked = append(m.asked, p)
	m.mu.Unlock()
	if strings.Contains(p, m.hang) {
		m.hung <- struct{}{}
		<-ctx.Done()
		return llm.Response{}, ctx.Err()
	}
	return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: `{"fact": "a fact", "importance": 0.7}`}}, nil
}

// hungOn is a namespace of two clusters to distil, e and g, the e cluster's asked
// first in the plan's order, and a model that stalls on the e cluster's question
// every time it is asked.
func hungOn(t *testing.T) (*fakeTarget, *oneHungQuestion, consolidator.Policy) {
	t.Helper()
	mems := twoClusters()
	for i := range mems[:3] { // episodes() has three dimensions; the clusters four
		mems[i].Vector = append(mems[i].Vector, 0)
	}
	return newFake(mems...), &oneHungQuestion{hang: "content of e1", hung: make(chan struct{}, 1)},
		only(consolidator.Policy{ClusterThreshold: 0.8})
}

// distilledG says whether f has a fact distilled from the g cluster.
func distilledG(f *fakeTarget) bool {
	for _, m := range f.Snapshot() {
		if m.Tier == memory.Semantic && slices.ContainsFunc(m.Sources, func(s messages.MemorySource) bool { return s.ID == "g1" }) {
			return true
		}
	}
	return false
}

// A question the model stalls on past the run's end (a route that hangs, retried by
// the gateway 4 times 2 minutes, past the 5-minute run) is asked after the others by
// the namespace's next run, so the other clusters are distilled. Before, every run
// planned the same order, asked the stalled question first and ended there: the g
// cluster was never distilled, run after run.
func TestSchedulerAsksAQuestionItsLastRunWasCutShortOnAfterTheOthers(t *testing.T) {
	f, model, p := hungOn(t)
	h := newScheduler(t, f, func(c *consolidator.SchedulerConfig) {
		c.Consolidator = consolidator.Config{Model: model, Policy: p}
	})
	for run := 1; run <= 2; run++ {
		ctx, cancel := context.WithCancel(context.Background())
		go func() { _, _ = h.sched.Consolidate(ctx, f.name, fmt.Sprint("run", run)) }()
		select {
		case <-model.hung:
		case <-time.After(10 * time.Second):
			t.Fatalf("run %d: the model was not asked the e cluster's question in 10 s", run)
		}
		cancel() // the run's end, while the model stalls
		out := h.nextRun(t)
		if !errors.Is(out.Err, context.Canceled) {
			t.Fatalf("run %d: %v, want the run cut short", run, out.Err)
		}
		if len(out.Report.Stalled) != 1 || !strings.HasPrefix(out.Report.Stalled[0], "distill-") {
			t.Fatalf("run %d: stalled on %q, want the e cluster's distillation", run, out.Report.Stalled)
		}
		if got := distilledG(f); got != (run == 2) {
			t.Fatalf("after run %d, the g cluster distilled: %v; applied %q", run, got, f.appliedChanges())
		}
	}
	model.mu.Lock()
	defer model.mu.Unlock()
	if len(model.asked) != 3 || !strings.Contains(model.asked[1], "content of g1") || !strings.Contains(model.asked[2], "content of e1") {
		t.Errorf("the model was asked %d questions, want e, then g and e:\n%s", len(model.asked), strings.Join(model.asked, "\n---\n"))
	}
}

// A question the model stalls on takes at most half of what is left of the run
// while others wait after it: the run distils the cluster after it, then ends,
// naming the stalled question for the next run to ask last. Before, the stalled
// question took the whole run and nothing after it was asked.
func TestRunGivesAStalledQuestionAtMostHalfOfTheRun(t *testing.T) {
	f, model, p := hungOn(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	rep, err := newConsolidator(t, model, p).Run(ctx, f, "run1")
	if err != nil {
		t.Fatalf("%v; report:\n%s", err, rep)
	}
	if !distilledG(f) || rep.Distilled != 1 {
		t.Fatalf("the g cluster was not distilled:\n%s", rep)
	}
	if len(rep.Stalled) != 1 || len(rep.Skipped) != 1 || !strings.Contains(rep.Skipped[0], "share of the run ran out") {
		t.Errorf("stalled %q, want the e cluster's question:\n%s", rep.Stalled, rep)
	}

	// The next run, told so, asks it last: after the others (none left), with the
	// whole run.
	next := &stallingModel{answers: 10}
	rep, err = newConsolidator(t, next, p).Run(context.Background(), f, "run2", consolidator.AskLast(rep.Stalled...))
	if err != nil || rep.Distilled != 1 || len(rep.Stalled) != 0 {
		t.Errorf("run2: %v:\n%s", err, rep)
	}
}
