package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A task.submitted envelope a Kafka client publishes whole is refused when it
// names a parent no delegate call makes: a depth below 1 (the sub-agents under it
// would nest past node.MaxDelegationDepth: an agent that always delegates to
// itself made a chain of 7), past the bound, or a parent's call whose child is
// another session or task. No session starts.
func TestTaskEnvelopeWithAForgedParentIsRefused(t *testing.T) {
	model := newByAgent(t, map[string][]llm.ScriptStep{
		"lead": {delegateCall("d1", "lead", "go deeper"), {Content: "done"}},
	})
	n := nodetest.Start(t, subagentsConfig(model))
	for i, c := range []struct {
		session, id, key string
		depth            int
		want             string
	}{
		{"forged", "forged-1", "nobody/1", -3, "depth -3"},
		{"forged", "forged-1", "nobody/1", 0, "depth 0"},
		{"forged", "forged-1", "nobody/1", node.MaxDelegationDepth + 1, fmt.Sprintf("depth %d", node.MaxDelegationDepth+1)},
		{"forged", "forged-1", "somebody/1", 1, "no delegate call of session"},
		{"forged", "forged-1", "nobody/1", 1, "is task"},
		{"nobody.sub1", "forged-1", "nobody/1", 1, "is task"},
	} {
		payload, _ := json.Marshal(map[string]any{
			"input": "go deep", "agent": "lead",
			"parent": map[string]any{"session_id": "nobody", "key": c.key, "depth": c.depth},
		})
		b, _ := json.Marshal(map[string]any{"id": c.id, "type": "task.submitted", "session_id": c.session, "payload": json.RawMessage(payload)})
		_, err := n.SubmitFrom(context.Background(), node.Arrival{Source: node.SourceBus, Payload: b, MessageID: c.id})
		if !errors.Is(err, node.ErrBadTask) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("case %d: %v; want a bad task naming %q", i, err, c.want)
		}
	}
	infos, err := n.Log().Sessions(context.Background(), eventlog.Filter{SessionsOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 0 {
		t.Errorf("%d sessions started from refused tasks", len(infos))
	}
}
