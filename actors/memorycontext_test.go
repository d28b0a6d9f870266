package actors_test

import (
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

const blocks = "<human description=\"what the agent knows of the person it talks with\" chars=\"14/2000\">\nLives in Oslo.\n</human>\n"

// A task's core memory (TaskSubmitted.Memory) is in the system prompt of its model
// calls, after the agent's own prompt; a task without it gets exactly the prompt it
// got before there was core memory; and each task gets its own.
func TestTaskMemoryIsInTheSystemPrompt(t *testing.T) {
	agent := actors.Agent{Model: "m", SystemPrompt: "Be brief."}
	st := actors.NewSessionState("s")
	apply := func(e messages.Envelope) {
		t.Helper()
		if err := st.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
	apply(env(t, &messages.TaskSubmitted{Input: "hi"}, "s", 1, "task-1"))
	if got := st.Request(agent).Messages[0]; got.Role != messages.RoleSystem || got.Content != "Be brief." {
		t.Fatalf("a task without memory: system message %+v", got)
	}
	mr := st.Decide(agent, 2, 0).Payload.(*messages.ModelRequested)
	apply(env(t, mr, "s", 2, "task-1"))
	apply(env(t, &messages.ModelResponded{Key: mr.Key, Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "hello"}}, "s", 3, "task-1"))
	apply(env(t, st.Decide(agent, 4, 0).Payload, "s", 4, "task-1")) // task.completed

	apply(env(t, &messages.TaskSubmitted{Input: "where do I live?", Memory: blocks}, "s", 5, "task-2"))
	want := "Be brief.\n\n<core_memory>\n"
	sys := st.Request(agent).Messages[0].Content
	if !strings.HasPrefix(sys, want) || !strings.Contains(sys, "Lives in Oslo.\n</human>\n</core_memory>") || strings.HasSuffix(sys, "\n") {
		t.Fatalf("system prompt with memory:\n%s", sys)
	}
	with := st.Decide(agent, 6, 0).Payload.(*messages.ModelRequested)
	if with.PromptHash == mr.PromptHash {
		t.Fatal("the memory must change the prompt hash")
	}

	// An agent without a system prompt gets the memory alone.
	if sys := st.Request(actors.Agent{Model: "m"}).Messages[0].Content; !strings.HasPrefix(sys, "<core_memory>\n") {
		t.Fatalf("memory without a system prompt:\n%q", sys)
	}
}

// A session whose task carried core memory verifies: the blocks come from the log.
func TestVerifyASessionWithTaskMemory(t *testing.T) {
	h := newHarness(t, harnessOpts{model: script(t, llm.ScriptStep{Content: "Oslo"})})
	e, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: "where do I live?", Memory: blocks})
	if err != nil {
		t.Fatal(err)
	}
	e.ID, e.SessionID, e.Actor = "task-m", "m", "test"
	if res, err := h.system.Root.RequestFuture(h.host, &actors.SubmitTask{Envelope: e}, 10*time.Second).Result(); err != nil {
		t.Fatal(err)
	} else if _, ok := res.(*actors.TaskAccepted); !ok {
		t.Fatalf("submit: %v", res)
	}
	events := h.wait("m")
	agent := actors.Agent{Model: "scripted", SystemPrompt: "test"}
	if div, err := actors.Verify(agent, events); err != nil || div != nil {
		t.Fatalf("verify: %v %v", div, err)
	}
	// Without the memory the same session's prompt would differ: it is in the hash.
	events[0].Payload = []byte(`{"input":"where do I live?"}`)
	if div, err := actors.Verify(agent, events); err != nil || div == nil || div.Seq != 2 {
		t.Fatalf("a task without its memory must diverge at its first model request: %v %v", div, err)
	}
}
