package node_test

import (
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A turn whose write after task found nothing to remember left no trace in the
// log (its namespace's stream got no event, and no other event said it was
// remembered), so every start's recovery (within afterTaskRecover) extracted its
// facts again: a model call per such turn of the last hour, at every start. Its
// Remember now ends with a memory.remembered under the turn's key, which the
// next start's recovery takes for the turn done.
func TestWriteAfterTaskTurnThatWroteNothingIsNotExtractedAgain(t *testing.T) {
	w := newDurableWorld(t)
	mm := &nothingToRemember{}
	start := func() (*node.Node, func()) {
		model, err := llm.NewScripted(llm.Script{Steps: []llm.ScriptStep{{Content: "Noted."}}})
		if err != nil {
			t.Fatal(err)
		}
		n, err := node.New(t.Context(), node.Config{Log: w.log, DataDir: w.data, Model: model, Memory: &memory.Config{Model: mm},
			MemoryTool: &memory.ToolConfig{Namespace: "agent:a"}, MemoryWriteAfterTask: true})
		if err != nil {
			t.Fatal(err)
		}
		stop, err := n.Start(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return n, stop
	}
	n1, stop1 := start()
	nodetest.Run(t, n1, "s-nothing", "Hello, this is my first message.")
	nodetest.Run(t, n1, "s-next", "Hello again.")
	wait := func(cond func() bool, what string) {
		deadline := time.Now().Add(30 * time.Second) // a hang guard
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatal(what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	wait(func() bool { return mm.others.Load() > 0 }, "the next turn was never remembered")
	stop1()
	before, others := mm.first.Load(), mm.others.Load()
	n2, stop2 := start()
	defer stop2()
	nodetest.Run(t, n2, "s-later", "Hello once more.")
	// The recovery, oldest session first, runs before the later turn.
	wait(func() bool { return mm.others.Load() > others }, "the later turn was never remembered")
	if after := mm.first.Load(); after != before {
		t.Errorf("the next start asked the memory model %d more times for a turn remembered already", after-before)
	}
	// Each turn is marked once, under its write after task's key.
	events, err := w.log.Read(t.Context(), memory.Stream("agent:a"), 1)
	if err != nil {
		t.Fatal(err)
	}
	marks := map[string]int{}
	for _, e := range events {
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		r, ok := p.(*messages.MemoryRemembered)
		if !ok {
			t.Fatalf("the namespace's stream holds a %s: nothing was written", e.Type)
		}
		marks[strings.SplitN(r.Key, "/", 2)[0]]++
		if r.Facts != 0 || len(strings.Split(r.Key, "/")) != 3 {
			t.Errorf("mark %+v: want the key <session>/<seq>/<task ID> and no fact", r)
		}
	}
	if marks["s-nothing"] != 1 || marks["s-next"] != 1 {
		t.Errorf("marks per session %v, want one for each of s-nothing and s-next", marks)
	}
}
