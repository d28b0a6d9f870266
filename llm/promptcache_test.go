package llm_test

import (
	"context"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// A conversation that grows by a turn each call is sent with the prefix it was sent
// before: from the second call on, the cache reports that prefix, in whole blocks,
// once it reaches 1024 tokens; a request whose system prompt or tools changed shares
// nothing.
func TestPromptCacheReportsTheSharedPrefixInBlocks(t *testing.T) {
	c := llm.NewPromptCache(0)
	sys := messages.ChatMessage{Role: messages.RoleSystem, Content: strings.Repeat("policy ", 800)} // ~1404 tokens
	tools := []messages.ToolSpec{{Name: "calculator", Description: "Evaluates arithmetic."}}
	msgs := []messages.ChatMessage{sys, {Role: messages.RoleUser, Content: "What is 2+2?"}}
	if got := c.Observe(llm.Request{Messages: msgs, Tools: tools}); got != 0 {
		t.Fatalf("first request: %d cached tokens, want 0", got)
	}
	msgs = append(msgs, messages.ChatMessage{Role: messages.RoleAssistant, Content: "4"}, messages.ChatMessage{Role: messages.RoleUser, Content: "and 3+3?"})
	got := c.Observe(llm.Request{Messages: msgs, Tools: tools})
	shared := llm.EstimateTokens(msgs[:3])
	if want := shared / 128 * 128; got != want || got < 1024 {
		t.Fatalf("second request: %d cached tokens, want %d (the first three messages, %d tokens, in blocks of 128)", got, want, shared)
	}
	if got := c.Observe(llm.Request{Messages: msgs, Tools: append(tools, messages.ToolSpec{Name: "clock"})}); got != 0 {
		t.Fatalf("other tools: %d cached tokens, want 0", got)
	}
	other := append([]messages.ChatMessage{{Role: messages.RoleSystem, Content: sys.Content + "!"}}, msgs[1:]...)
	if got := c.Observe(llm.Request{Messages: other, Tools: tools}); got != 0 {
		t.Fatalf("another system prompt: %d cached tokens, want 0", got)
	}
	short := []messages.ChatMessage{{Role: messages.RoleSystem, Content: "short"}, {Role: messages.RoleUser, Content: "hi"}}
	c.Observe(llm.Request{Messages: short})
	if got := c.Observe(llm.Request{Messages: short}); got != 0 {
		t.Fatalf("a repeated prompt under 1024 tokens: %d cached tokens, want 0", got)
	}
}

// The cache forgets its oldest prefixes beyond its capacity.
func TestPromptCacheForgetsBeyondItsCapacity(t *testing.T) {
	c := llm.NewPromptCache(4)
	long := []messages.ChatMessage{{Role: messages.RoleSystem, Content: strings.Repeat("x", 8000)}, {Role: messages.RoleUser, Content: "a"}}
	c.Observe(llm.Request{Messages: long}) // three keys: tools, system, user
	if got := c.Observe(llm.Request{Messages: long}); got < 1024 {
		t.Fatalf("repeated: %d cached tokens, want ≥ 1024", got)
	}
	for i := range 4 {
		c.Observe(llm.Request{Messages: []messages.ChatMessage{{Role: messages.RoleUser, Content: strings.Repeat("y", i+1)}}})
	}
	if got := c.Observe(llm.Request{Messages: long}); got != 0 {
		t.Fatalf("after the cache was refilled: %d cached tokens, want 0", got)
	}
}

// The offline model made by NewOffline and a scripted model given a cache report
// cached tokens in their usage; the zero offline model reports none.
func TestModelsReportCachedTokens(t *testing.T) {
	ctx := context.Background()
	req := llm.Request{Step: 1, Messages: []messages.ChatMessage{{Role: messages.RoleSystem, Content: strings.Repeat("rules ", 1000)},
		{Role: messages.RoleUser, Content: "echo hi"}}}
	sc, err := llm.NewScripted(llm.Script{Steps: []llm.ScriptStep{{Content: "hi"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []llm.Model{llm.NewOffline(), sc.WithPromptCache(llm.NewPromptCache(0))} {
		if r, err := m.Generate(ctx, req); err != nil || r.Usage.CachedTokens != 0 {
			t.Fatalf("%s, first call: usage %+v, err %v; want no cached tokens", m.Name(), r.Usage, err)
		}
		r, err := m.Generate(ctx, req)
		if err != nil || r.Usage.CachedTokens < 1024 || r.Usage.CachedTokens > r.Usage.PromptTokens {
			t.Fatalf("%s, second call: usage %+v, err %v; want 1024 ≤ cached ≤ prompt tokens", m.Name(), r.Usage, err)
		}
	}
	m := llm.Offline{}
	m.Generate(ctx, req)
	if r, _ := m.Generate(ctx, req); r.Usage.CachedTokens != 0 {
		t.Fatalf("zero Offline: %d cached tokens, want 0", r.Usage.CachedTokens)
	}
}
