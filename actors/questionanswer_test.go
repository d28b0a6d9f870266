package actors_test

import (
	"fmt"
	"slices"
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

// An earlier task that called tools keeps its input with the answer that ends
// it, after the calls and their results: a session of tasks whose questions
// outgrow the window, each answered after a tool call, sends no answer without
// its question. Under rules 16 only an answer that directly followed its question
// was tied to it, and such a session sent a run of answers (and calls) after the
// system message, their questions dropped.
func TestEarlierAnswersAfterToolsGoWithTheirQuestions(t *testing.T) {
	if alone := answersAfterToolsAlone(t, actors.ContextRules); alone != "" {
		t.Fatal(alone)
	}
	if answersAfterToolsAlone(t, 16) == "" {
		t.Fatal("under rules 16 every answer after a tool call was sent with its question")
	}
}

// answersAfterToolsAlone runs a session of six tasks under rules, each a tool
// call and then its answer, and says where a prompt sent an answer without its
// question ("" when none did).
func answersAfterToolsAlone(t *testing.T, rules int) string {
	t.Helper()
	agent := actors.Agent{Model: "m", SystemPrompt: "You answer questions.", MaxSteps: 5,
		Tools:       []messages.ToolSpec{{Name: "lookup", Description: "Looks a page up.", Parameters: []byte(`{"type":"object","properties":{"page":{"type":"integer"}}}`)}},
		LoopRepeats: actors.LoopOff, LoopStaleSteps: actors.LoopOff,
		Context: actors.ContextOptions{Window: 1400, ReservedOutput: 200, Compression: actors.Compression{Model: actors.NoSummaryModel}}}
	st := actors.NewSessionState("s")
	var seq uint64
	for k := range 6 {
		task := fmt.Sprintf("task-%d", k)
		apply := func(p messages.Payload, cause string) {
			t.Helper()
			seq++
			e := env(t, p, "s", seq, task)
			e.CausationID = cause
			if err := st.Apply(e); err != nil {
				t.Fatal(err)
			}
		}
		apply(&messages.TaskSubmitted{Input: fmt.Sprintf("Question %d: %s what is it?", k, strings.Repeat(fmt.Sprintf("word%d ", k), 300)),
			Rules: rules}, "")
		for step := 0; ; step++ {
			d := st.Decide(agent, seq+1, 0)
			switch p := d.Payload.(type) {
			case *messages.ModelRequested:
				apply(p, d.CausationID)
				msgs := st.Request(agent).Messages
				for i, m := range msgs {
					var n int
					if _, err := fmt.Sscanf(m.Content, "Answer %d.", &n); err != nil || m.Role != messages.RoleAssistant {
						continue
					}
					if !slices.ContainsFunc(msgs[:i], func(q messages.ChatMessage) bool {
						return q.Role == messages.RoleUser && strings.HasPrefix(q.Content, fmt.Sprintf("Question %d:", n))
					}) {
						return fmt.Sprintf("task %d: message %d, the answer %q, is sent without its question: %d messages, %d dropped",
							k, i, m.Content, len(msgs), len(p.Context.Dropped))
					}
				}
				reply := messages.ChatMessage{Role: messages.RoleAssistant, Content: fmt.Sprintf("Answer %d.", k)}
				if step == 0 {
					reply = messages.ChatMessage{Role: messages.RoleAssistant, ToolCalls: []messages.ToolCall{{ID: fmt.Sprintf("c%d", k), Name: "lookup", Arguments: `{"page":1}`}}}
				}
				apply(&messages.ModelResponded{Key: p.Key, Message: reply, Usage: messages.Usage{PromptTokens: 10, CompletionTokens: 5}}, p.Key)
			case *messages.ToolCallRequested:
				apply(p, d.CausationID)
				apply(&messages.ToolCallCompleted{Key: p.Key, CallID: p.CallID, Tool: p.Tool, Result: fmt.Sprintf("page %d", k)}, p.Key)
			case *messages.TaskCompleted:
				apply(p, d.CausationID)
			default:
				t.Fatalf("task %d: decided %T", k, d.Payload)
			}
			if _, done := d.Payload.(*messages.TaskCompleted); done {
				break
			}
		}
	}
	return ""
}
