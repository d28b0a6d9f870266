package actors_test

import (
	"context"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// emptyModel answers every call with nothing but content (no tool calls, a whole
// answer, finish_reason "stop"), as providers sometimes do: "" or white space.
type emptyModel struct{ content string }

func (emptyModel) Name() string { return "empty" }
func (m emptyModel) Generate(context.Context, llm.Request) (llm.Response, error) {
	return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: m.content}, Usage: messages.Usage{PromptTokens: 5}}, nil
}

// An empty answer is no answer (rules 9): the task fails with empty_answer rather
// than completing with "" as its output; a task recorded under rules 8 still
// verifies as it ran, completed with the empty text.
func TestEmptyAnswerDoesNotCompleteTheTask(t *testing.T) {
	for _, content := range []string{"", " \n\t "} {
		var agent actors.Agent
		h := newHarness(t, harnessOpts{model: emptyModel{content}, maxSteps: 4, deps: func(d *actors.SessionDeps) { agent = d.Agent }})
		h.submit("s1", "task-1", "What is 2+2?")
		events := h.wait("s1")
		verifyDeterministic(t, agent, events)
		if last := events[len(events)-1]; last.Type == messages.TypeTaskCompleted {
			t.Fatalf("the task completed with the empty answer %q: %s", decode[*messages.TaskCompleted](t, last).Output, types(events))
		}
		if f := failure(t, events); f.Reason != messages.ReasonEmptyAnswer || !strings.Contains(f.Error, "empty") || f.Steps != 1 {
			t.Fatalf("failure %+v; want empty_answer after 1 step", f)
		}
		if div := underOlderRules(t, agent, events, 8); div == nil || !strings.Contains(div.Actual, "task.completed") {
			t.Fatalf("under rules 8 the task completes with the empty text: %+v", div)
		}
	}
}
