package node_test

import (
	"context"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A node pinned to older decision rules (Config.DecisionRules, for a rolling
// upgrade) records its new tasks under them and decides them so: an empty
// answer, which rules 9 fail (empty_answer), completes the task with "" under
// rules 8, as a node of a build whose newest rules are 8 decides it, and the task
// says 8, which such a node can continue. Unpinned, the task records this build's.
func TestPinnedDecisionRulesRecordAndDecideNewTasks(t *testing.T) {
	for _, c := range []struct {
		pin, want int
		status    string
	}{
		{8, 8, messages.StatusCompleted},
		{0, actors.ContextRules, messages.StatusFailed},
	} {
		n := nodetest.Start(t, node.Config{Model: silentModel{}, DecisionRules: c.pin})
		events := nodetest.Run(t, n, "pinned", "say nothing")
		var rules int
		for _, e := range events {
			if e.Type == messages.TypeTaskSubmitted {
				p, err := e.Decode()
				if err != nil {
					t.Fatal(err)
				}
				rules = p.(*messages.TaskSubmitted).Rules
			}
		}
		st, ok, err := n.Status(context.Background(), "pinned")
		if err != nil || !ok {
			t.Fatalf("status: %v %v", ok, err)
		}
		if rules != c.want || st.Status != c.status {
			t.Errorf("pinned to %d: the task recorded rules %d and ended %s (%s), want %d and %s", c.pin, rules, st.Status, st.Error, c.want, c.status)
		}
	}
}

// silentModel answers every call with no text and no tool calls.
type silentModel struct{}

func (silentModel) Name() string { return "silent" }

func (silentModel) Generate(context.Context, llm.Request) (llm.Response, error) {
	return llm.Response{}, nil
}

// A version this build does not have is refused at start, naming the versions it has.
func TestPinnedDecisionRulesOutOfRangeAreRefused(t *testing.T) {
	for _, v := range []int{-1, actors.MinContextRules - 1, actors.ContextRules + 1} {
		if v == 0 {
			continue
		}
		_, err := node.New(context.Background(), node.Config{DataDir: t.TempDir(), DecisionRules: v})
		if err == nil || !strings.Contains(err.Error(), "decision rules") {
			t.Errorf("DecisionRules %d: %v, want refused", v, err)
		}
	}
}
