package llm_test

import (
	"context"
	"errors"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

var specs = []messages.ToolSpec{{Name: "calculator"}, {Name: "clock"}}

func user(s string) []messages.ChatMessage {
	return []messages.ChatMessage{{Role: messages.RoleSystem, Content: "sys"}, {Role: messages.RoleUser, Content: s}}
}

func TestOfflinePlansArithmetic(t *testing.T) {
	cases := map[string]string{
		"What is 12 * (7 + 5)?":       `{"expression":"12 * (7 + 5)"}`,
		"compute sqrt(16) + 2":        `{"expression":"sqrt(16) + 2"}`,
		"what's 3 plus 4":             `{"expression":"3 + 4"}`,
		"Calculate 2^10, please.":     `{"expression":"2^10"}`,
		"How much is 1.5e3 / 3 - 1 ?": `{"expression":"1.5e3 / 3 - 1"}`,
	}
	for in, want := range cases {
		r, err := llm.Offline{}.Generate(context.Background(), llm.Request{Step: 1, Messages: user(in), Tools: specs})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Message.ToolCalls) != 1 || r.Message.ToolCalls[0].Name != "calculator" || r.Message.ToolCalls[0].Arguments != want {
			t.Errorf("%q: got %+v, want calculator %s", in, r.Message, want)
		}
	}
}

func TestOfflineAnswersFromToolResult(t *testing.T) {
	msgs := append(user("What is 12 * (7 + 5)?"),
		messages.ChatMessage{Role: messages.RoleAssistant, ToolCalls: []messages.ToolCall{{ID: "c", Name: "calculator", Arguments: "{}"}}},
		messages.ChatMessage{Role: messages.RoleTool, Name: "calculator", ToolCallID: "c", Content: "144"})
	r, err := llm.Offline{}.Generate(context.Background(), llm.Request{Step: 2, Messages: msgs, Tools: specs})
	if err != nil {
		t.Fatal(err)
	}
	if r.Message.Content != "144" || len(r.Message.ToolCalls) != 0 {
		t.Fatalf("got %+v", r.Message)
	}
}

func TestOfflineClockEchoAndFallback(t *testing.T) {
	r, _ := llm.Offline{}.Generate(context.Background(), llm.Request{Step: 1, Messages: user("What time is it in Asia/Tokyo?"), Tools: specs})
	if len(r.Message.ToolCalls) != 1 || r.Message.ToolCalls[0].Arguments != `{"timezone":"Asia/Tokyo"}` {
		t.Fatalf("clock: %+v", r.Message)
	}
	r, _ = llm.Offline{}.Generate(context.Background(), llm.Request{Step: 1, Messages: user("echo Hello, World"), Tools: specs})
	if r.Message.Content != "Hello, World" {
		t.Fatalf("echo: %+v", r.Message)
	}
	r, _ = llm.Offline{}.Generate(context.Background(), llm.Request{Step: 1, Messages: user("write me a poem"), Tools: specs})
	if len(r.Message.ToolCalls) != 0 || r.Message.Content == "" {
		t.Fatalf("fallback: %+v", r.Message)
	}
	if _, err := (llm.Offline{}).Generate(context.Background(), llm.Request{Step: 1}); err == nil {
		t.Fatal("no user message must be an error")
	}
}

func TestScripted(t *testing.T) {
	m, err := llm.NewScripted(llm.Script{Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{{ID: "a", Name: "calculator", Arguments: `{"expression":"1+1"}`}}},
		{Content: "2"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := m.Generate(context.Background(), llm.Request{Step: 2, Messages: user("x")})
	if err != nil || r.Message.Content != "2" {
		t.Fatalf("step 2: %+v %v", r, err)
	}
	if _, err := m.Generate(context.Background(), llm.Request{Step: 3}); !errors.Is(err, llm.ErrScriptExhausted) {
		t.Fatalf("step 3: %v", err)
	}
	if _, err := llm.NewScripted(llm.Script{Steps: []llm.ScriptStep{{}}}); err == nil {
		t.Fatal("an empty step must be rejected")
	}
	if _, err := llm.LoadScript("testdata/missing.json"); err == nil {
		t.Fatal("missing file must be an error")
	}
}

func TestPromptHashIsStable(t *testing.T) {
	a := llm.Request{Messages: user("x"), Tools: specs}
	b := llm.Request{Messages: user("x"), Tools: specs}
	if llm.PromptHash(a) != llm.PromptHash(b) {
		t.Fatal("same request, different hash")
	}
	b.Messages = user("y")
	if llm.PromptHash(a) == llm.PromptHash(b) {
		t.Fatal("different request, same hash")
	}
}
