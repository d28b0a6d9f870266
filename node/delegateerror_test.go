package node_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// wordy is a model whose calls for one agent fail with an error of 60 KiB (a
// provider's HTML error page).
type wordy struct{ *byAgent }

func (w wordy) Generate(ctx context.Context, r llm.Request) (llm.Response, error) {
	if r.Scope.Agent == "flaky" {
		return llm.Response{}, errors.New("upstream: " + strings.Repeat("<div>bad gateway</div>", 60<<10/22))
	}
	return w.byAgent.Generate(ctx, r)
}

// A child that fails with a huge error: the parent's model reads the error within
// the bound of a delegate call's answer, with its reason and child session.
func TestDelegateChildsHugeErrorIsCut(t *testing.T) {
	model := wordy{newByAgent(t, map[string][]llm.ScriptStep{
		"lead": {delegateCall("d1", "flaky", "anything"), {Content: "carried on"}},
	})}
	n := nodetest.Start(t, subagentsConfig(model))
	events := runAgentTask(t, n, node.Task{Input: "go", SessionID: "p", Agent: "lead", DeadlineMS: 20_000})
	res := delegateResult(t, events)
	t.Logf("error: %d bytes: %.300q", len(res.Error), res.Error)
	if res.Error == "" || !strings.Contains(res.Error, "p.sub4") || !strings.Contains(res.Error, string(messages.ReasonModelError)) {
		t.Errorf("the delegate call to a failing child: %.300q", res.Error)
	}
	if len(res.Error) > node.MaxDelegateResult {
		t.Errorf("the child's error reaches the parent whole: %d bytes, more than a delegate answer's %d", len(res.Error), node.MaxDelegateResult)
	}
	if ended := payloads[*messages.TaskCompleted](t, events); len(ended) != 1 {
		t.Errorf("the parent did not go on: %s", typesOf(events))
	}
}
