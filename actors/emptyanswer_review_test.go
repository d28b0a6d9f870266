//go:build review

package actors_test

import (
	"context"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// emptyModel answers every call with nothing: no text, no tool calls, a whole
// answer (finish_reason "stop"), as providers sometimes do.
type emptyModel struct{}

func (emptyModel) Name() string { return "empty" }
func (emptyModel) Generate(context.Context, llm.Request) (llm.Response, error) {
	return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant}, Usage: messages.Usage{PromptTokens: 5}}, nil
}

// An empty answer is no answer: the task should not complete with "" as its output
// (a decision: it needs a rules version to change).
func TestEmptyAnswerDoesNotCompleteTheTask(t *testing.T) {
	var agent actors.Agent
	h := newHarness(t, harnessOpts{model: emptyModel{}, maxSteps: 4, deps: func(d *actors.SessionDeps) { agent = d.Agent }})
	h.submit("s1", "task-1", "What is 2+2?")
	events := h.wait("s1")
	verifyDeterministic(t, agent, events)
	if last := events[len(events)-1]; last.Type == messages.TypeTaskCompleted {
		t.Fatalf("the task completed with the empty answer %q: %s", decode[*messages.TaskCompleted](t, last).Output, types(events))
	}
}
