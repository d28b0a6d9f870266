package node_test

import (
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A node pinned to decision rules 11 (a rolling upgrade from, or a rollback to
// come to, a build of 11) writes no memory.remembered mark: a build of 11
// cannot fold a namespace holding one. Its write after task that found nothing
// to keep leaves the namespace's stream as that build does, empty; unpinned (or
// pinned to 12) it leaves the mark.
func TestPinnedDecisionRulesWithholdTheRememberedMark(t *testing.T) {
	for _, c := range []struct {
		pin, marks int
	}{{11, 0}, {0, 1}, {actors.ContextRules, 1}} {
		w := newDurableWorld(t)
		mm := &nothingToRemember{}
		model, err := llm.NewScripted(llm.Script{Steps: []llm.ScriptStep{{Content: "Noted."}}})
		if err != nil {
			t.Fatal(err)
		}
		n, stop := nodetest.StartWithStop(t, node.Config{Log: w.log, DataDir: w.data, Model: model, Memory: &memory.Config{Model: mm},
			MemoryTool: &memory.ToolConfig{Namespace: "agent:a"}, MemoryWriteAfterTask: true, DecisionRules: c.pin})
		nodetest.Run(t, n, "s-nothing", "Hello, this is my first message.")
		// The turns are remembered in order: once the next one's is asked for, the
		// first one's Remember (and its mark, if any) is done.
		nodetest.Run(t, n, "s-next", "Hello again.")
		deadline := time.Now().Add(30 * time.Second) // a hang guard
		for mm.others.Load() == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the next turn was never remembered")
			}
			time.Sleep(10 * time.Millisecond)
		}
		stop()
		events, err := w.log.Read(t.Context(), memory.Stream("agent:a"), 1)
		if err != nil {
			t.Fatal(err)
		}
		marks := 0
		for _, e := range events {
			if e.Type != messages.TypeMemoryRemembered {
				t.Fatalf("pinned to %d: the namespace's stream holds a %s: nothing was written", c.pin, e.Type)
			}
			p, err := e.Decode()
			if err != nil {
				t.Fatal(err)
			}
			if r := p.(*messages.MemoryRemembered); strings.HasPrefix(r.Key, "s-nothing/") {
				marks++
			}
		}
		if marks != c.marks {
			t.Errorf("pinned to %d: %d memory.remembered for the first turn (%d events in the stream), want %d", c.pin, marks, len(events), c.marks)
		}
		if c.marks == 0 && len(events) != 0 {
			t.Errorf("pinned to %d: the namespace's stream holds %d events, want none", c.pin, len(events))
		}
	}
}
