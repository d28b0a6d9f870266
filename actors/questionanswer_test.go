package actors_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/messages"
)

// An earlier task's input and the answer that follows it go or stay together: a
// session of chat turns whose questions outgrow the window, their answers short,
// sends no answer without the question it answers (a conversation of answers in a
// row after the system message, which a chat template that wants the roles to
// alternate refuses, and which tells the model nothing of what they answer). The
// running task's input and the system message are always sent. Under rules 15
// the answers went alone (a recorded task's prompts stay as they were).
func TestEarlierAnswersGoWithTheirQuestions(t *testing.T) {
	if alone := answersAlone(t, actors.ContextRules); alone != "" {
		t.Fatal(alone)
	}
	if answersAlone(t, 15) == "" {
		t.Fatal("under rules 15 every answer was sent with its question")
	}
}

// answersAlone runs a session of six chat turns under rules and says where a
// prompt sent an answer without its question ("" when none did).
func answersAlone(t *testing.T, rules int) string {
	t.Helper()
	agent := actors.Agent{Model: "m", SystemPrompt: "You answer questions.", MaxSteps: 5,
		LoopRepeats: actors.LoopOff, LoopStaleSteps: actors.LoopOff,
		Context: actors.ContextOptions{Window: 1200, ReservedOutput: 200, Compression: actors.Compression{Model: actors.NoSummaryModel}}}
	st := actors.NewSessionState("s")
	var seq uint64
	apply := func(p messages.Payload, cause, task string) {
		t.Helper()
		seq++
		e := env(t, p, "s", seq, task)
		e.CausationID = cause
		if err := st.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
	for k := range 6 {
		task := fmt.Sprintf("task-%d", k)
		apply(&messages.TaskSubmitted{Input: fmt.Sprintf("Question %d: %s what is it?", k, strings.Repeat(fmt.Sprintf("word%d ", k), 300)),
			Rules: rules}, "", task)
		d := st.Decide(agent, seq+1, 0)
		p, ok := d.Payload.(*messages.ModelRequested)
		if !ok {
			t.Fatalf("task %d: decided %T", k, d.Payload)
		}
		apply(p, d.CausationID, task)
		req := st.Request(agent)
		msgs := req.Messages
		if msgs[0].Role != messages.RoleSystem || !strings.Contains(msgs[0].Content, "You answer questions.") {
			t.Fatalf("task %d: the first message is not the system prompt: %+v", k, msgs[0])
		}
		if last := msgs[len(msgs)-1]; last.Role != messages.RoleUser || !strings.HasPrefix(last.Content, fmt.Sprintf("Question %d:", k)) {
			t.Fatalf("task %d: the last message is not the task's input: %.80q", k, last.Content)
		}
		for i := 1; i < len(msgs); i++ {
			if msgs[i].Role == messages.RoleAssistant && msgs[i-1].Role != messages.RoleUser {
				return fmt.Sprintf("task %d: message %d, the answer %q, follows a %s message, not its question: %d messages, %d dropped",
					k, i, msgs[i].Content, msgs[i-1].Role, len(msgs), len(p.Context.Dropped))
			}
		}
		apply(&messages.ModelResponded{Key: p.Key, Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: fmt.Sprintf("Answer %d.", k)},
			Usage: messages.Usage{PromptTokens: 10, CompletionTokens: 5}}, p.Key, task)
		d = st.Decide(agent, seq+1, 0)
		done, ok := d.Payload.(*messages.TaskCompleted)
		if !ok {
			t.Fatalf("task %d: decided %T after the answer", k, d.Payload)
		}
		apply(done, d.CausationID, task)
	}
	return ""
}
