package gateway_test

import (
	"context"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
)

// OpenAI answers an account out of credits with a 429 whose code is
// insufficient_quota, Zhipu with a 429 whose code is 1113: no retry can succeed before someone pays, so the gateway
// falls over to the next model at once. It retried it as a rate limit, every
// attempt a wasted request and a wait, before the backup was asked.
func TestAnAccountOutOfCreditsIsNotRetried(t *testing.T) {
	for name, body := range map[string]string{
		"openai": `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`,
		// Zhipu: "your account is in arrears, top it up and try again".
		"zhipu": `{"error":{"code":"1113","message":"您的账户已欠费，请充值后重试。"}}`,
	} {
		t.Run(name, func(t *testing.T) { outOfCredits(t, body) })
	}
}

func outOfCredits(t *testing.T, body string) {
	broke := openaitest.NewServer(t, func(openaitest.Request) openaitest.Reply {
		return openaitest.Reply{Status: 429, Body: body}
	})
	up := openaitest.NewServer(t, openaitest.Sequence(openaitest.Completion(messages.ChatMessage{Content: "from backup"}, messages.Usage{PromptTokens: 3, CompletionTokens: 2})))
	model := func(srv *openaitest.Server, name string) llm.Model {
		m, err := openai.New(openai.Config{Provider: name, BaseURL: srv.URL, Model: name, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	var waits []time.Duration
	g, err := gateway.New(gateway.Config{Chain: []llm.Model{model(broke, "primary"), model(up, "backup")},
		Sleep: func(_ context.Context, d time.Duration) error { waits = append(waits, d); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	r, err := g.Generate(ctx, llm.Request{Step: 1, Messages: []messages.ChatMessage{{Role: messages.RoleUser, Content: "hi"}}})
	if err != nil || r.Message.Content != "from backup" {
		t.Fatalf("%+v %v", r, err)
	}
	if n := len(broke.Requests()); n != 1 || len(waits) != 0 {
		t.Fatalf("the account out of credits was asked %d times, with waits %v: want once, no wait", n, waits)
	}
}
