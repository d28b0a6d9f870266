//go:build review

package node_test

import (
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// Repro, left for review (go test -tags review ./node -run
// TestWriteAfterTaskTurnThatWroteNothingIsExtractedAgainAtTheNextStart): a turn
// whose write after task found nothing to remember leaves no trace in the log
// (its namespace's stream gets no event, and no other event says it was
// remembered), so the next start's recovery (within afterTaskRecover) extracts
// its facts again: a model call per such turn of the last hour, at every start.
// Skipping it needs a durable mark that the turn was remembered: a new event
// (say memory.remembered on the namespace's stream, with the key and nothing
// written) or a recovery mark per partition, as the publication marks are; a
// change of the log's events, left to the lead.
func TestWriteAfterTaskTurnThatWroteNothingIsExtractedAgainAtTheNextStart(t *testing.T) {
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
}
