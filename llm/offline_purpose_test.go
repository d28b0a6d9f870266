package llm_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// The offline model answers the paradigms' calls by their purpose: a passing
// critique, an evaluation that judges poor only its own "what I can do" answer, and
// a lesson in the shape reflexion reads.
func TestOfflineAnswersThePurposes(t *testing.T) {
	ask := func(purpose, user string) map[string]any {
		t.Helper()
		r, err := llm.Offline{}.Generate(context.Background(), llm.Request{Purpose: purpose, Step: 2, Messages: []messages.ChatMessage{
			{Role: messages.RoleSystem, Content: "judge"}, {Role: messages.RoleUser, Content: user}}})
		if err != nil {
			t.Fatal(err)
		}
		var out map[string]any
		if err := json.Unmarshal([]byte(r.Message.Content), &out); err != nil {
			t.Fatalf("%s: %q is not JSON: %v", purpose, r.Message.Content, err)
		}
		return out
	}
	// Its own answer to a task it cannot do, as the loop gives it.
	r, err := llm.Offline{}.Generate(context.Background(), llm.Request{Step: 1, Messages: []messages.ChatMessage{{Role: messages.RoleUser, Content: "Who wrote Hamlet?"}}})
	if err != nil {
		t.Fatal(err)
	}
	cannot := "The task:\nWho wrote Hamlet?\n\nThe answer:\n" + r.Message.Content
	if v := ask("critique", cannot); v["verdict"] != "pass" {
		t.Fatalf("critique: %v", v)
	}
	if v := ask("evaluate", cannot); v["verdict"] != "revise" || len(v["issues"].([]any)) != 1 {
		t.Fatalf("evaluate its own fallback: %v", v)
	}
	if v := ask("evaluate", "The task:\nWhat is 2+2?\n\nThe answer:\n4"); v["verdict"] != "pass" {
		t.Fatalf("evaluate an answer: %v", v)
	}
	l := ask("lesson", cannot)
	if w, _ := l["what_went_wrong"].(string); !strings.Contains(w, "beyond arithmetic") || l["do_instead"] == "" {
		t.Fatalf("lesson: %v", l)
	}
	// With its own lesson in the system prompt, it says at once that the task needs
	// a real model, an answer its evaluator passes.
	do, _ := l["do_instead"].(string)
	r, err = llm.Offline{}.Generate(context.Background(), llm.Request{Step: 1, Messages: []messages.ChatMessage{
		{Role: messages.RoleSystem, Content: "You help.\n\n<lessons>\n- Task: Who wrote Hamlet?\n  Do instead: " + do + "\n</lessons>"},
		{Role: messages.RoleUser, Content: "Who wrote Macbeth?"}}})
	if err != nil || !strings.HasPrefix(r.Message.Content, "This task needs a real language model") {
		t.Fatalf("with its lesson: %+v %v", r, err)
	}
	if v := ask("evaluate", "The task:\nWho wrote Macbeth?\n\nThe answer:\n"+r.Message.Content); v["verdict"] != "pass" {
		t.Fatalf("evaluate the answer the lesson changed: %v", v)
	}
	// A purpose it does not know gets the loop's answer.
	r, err = llm.Offline{}.Generate(context.Background(), llm.Request{Purpose: "plan", Step: 1, Messages: []messages.ChatMessage{{Role: messages.RoleUser, Content: "echo hi"}}})
	if err != nil || r.Message.Content != "hi" {
		t.Fatalf("an unknown purpose: %+v %v", r, err)
	}
}
