package consolidator_test

import (
	"context"
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

// alwaysCompatible judges every pair of facts compatible, recording the prompts.
type alwaysCompatible struct {
	mu    sync.Mutex
	asked []string
}

func (m *alwaysCompatible) Name() string { return "compatible" }

func (m *alwaysCompatible) Generate(_ context.Context, req llm.Request) (llm.Response, error) {
	m.mu.Lock()
	m.asked = append(m.asked, req.Messages[len(req.Messages)-1].Content)
	m.mu.Unlock()
	return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant,
		Content: `{"contradicts": false, "reason": "about different things"}`}}, nil
}

func (m *alwaysCompatible) questions() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.asked...)
}

// A pair of facts the model judged compatible is not put to it again by the
// namespace's next run while the facts are as they were: the run judges the next
// closest pair instead. Before, every run asked the model the same question (a call
// answered already, made again at every run), and with MaxJudgements 1 the pair c/d
// was never judged, the closest compatible pair taking the run's one judgement for
// ever.
func TestSchedulerDoesNotAskAgainAQuestionAnsweredWithoutAChange(t *testing.T) {
	mems := []memory.Memory{
		withVector(mem("a", memory.Semantic, 0.5, 10*day), 1, 0, 0, 0),        // older
		withVector(mem("b", memory.Semantic, 0.5, 5*day), 0.8, 0.6, 0, 0),     // cosine 0.8 with a
		withVector(mem("c", memory.Semantic, 0.5, 10*day), 0, 0, 1, 0),        // older
		withVector(mem("d", memory.Semantic, 0.5, 5*day), 0, 0, 0.78, 0.6258), // cosine 0.78 with c
	}
	for i := range mems {
		mems[i].Version = 1
	}
	f := newFake(mems...)
	model := &alwaysCompatible{}
	p := only(consolidator.Policy{ConflictThreshold: 0.75})
	p.MaxJudgements = 1
	h := newScheduler(t, f, func(c *consolidator.SchedulerConfig) {
		c.Consolidator = consolidator.Config{Model: model, Policy: p, Now: func() time.Time { return now }}
	})
	for run := 1; run <= 3; run++ {
		if _, err := h.sched.Consolidate(context.Background(), f.name, fmt.Sprint("run", run)); err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		h.nextRun(t)
	}
	asked := model.questions()
	if len(asked) != 2 || !strings.Contains(asked[0], `id="a"`) || !strings.Contains(asked[1], `id="c"`) {
		t.Fatalf("the model was asked %d questions, want a/b once then c/d once:\n%s", len(asked), strings.Join(asked, "\n---\n"))
	}
	// A fact rewritten since is a new question.
	f.mu.Lock()
	a := f.mems["a"]
	a.Content, a.Version = "Alice's favourite colour is blue.", 2
	f.mems["a"] = a
	f.mu.Unlock()
	if _, err := h.sched.Consolidate(context.Background(), f.name, "run4"); err != nil {
		t.Fatal(err)
	}
	h.nextRun(t)
	if asked = model.questions(); len(asked) != 3 || !strings.Contains(asked[2], `id="a"`) {
		t.Fatalf("after a was rewritten, the model was asked %d questions, want a/b again:\n%s", len(asked), strings.Join(asked, "\n---\n"))
	}
}

// A cluster in which the model found no durable fact is not put to it again by a run
// given that answer (Settled), while its episodes are as they were; one of them
// rewritten makes it a question again.
func TestRunDoesNotAskAgainForAClusterWithoutAFact(t *testing.T) {
	f := newFake(episodes()...)
	model := scripted(t, `{"fact": ""}`, `{"fact": ""}`)
	c := newConsolidator(t, model, only(consolidator.Policy{ClusterThreshold: 0.8}))
	rep, err := c.Run(context.Background(), f, "run1")
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Settled) != 1 || !strings.HasPrefix(rep.Settled[0], "distill-") {
		t.Fatalf("settled %q, want the cluster's answer\n%s", rep.Settled, rep)
	}
	again, err := c.Run(context.Background(), f, "run2", consolidator.Settled(rep.Settled...))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(model.reqs); n != 1 || len(again.Skipped) != 0 || !slices.Equal(again.Settled, rep.Settled) {
		t.Fatalf("the model was asked %d times, want once; settled %q, skipped %q", n, again.Settled, again.Skipped)
	}
	f.mu.Lock()
	e := f.mems["e1"]
	e.Content, e.Version = e.Content+" (rewritten)", e.Version+1
	f.mems["e1"] = e
	f.mu.Unlock()
	if _, err := c.Run(context.Background(), f, "run3", consolidator.Settled(rep.Settled...)); err != nil {
		t.Fatal(err)
	}
	if n := len(model.reqs); n != 2 {
		t.Fatalf("after e1 was rewritten, the model was asked %d times, want twice", n)
	}
}
