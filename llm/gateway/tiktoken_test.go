package gateway_test

import (
	"context"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
	"github.com/troupe-run/troupe/messages"
)

func TestTiktokenCountsOffline(t *testing.T) {
	tk, err := gateway.NewTiktoken("cl100k_base")
	if err != nil {
		t.Fatal(err)
	}
	// Reference counts of OpenAI's cl100k_base encoding.
	for text, want := range map[string]int{"hello world": 2, "tiktoken is great!": 6, "": 0} {
		if got := tk.Count(text); got != want {
			t.Errorf("%q: %d tokens, want %d", text, got, want)
		}
	}
	if _, err := gateway.NewTiktoken("no_such_encoding"); err == nil {
		t.Fatal("an unknown encoding must be an error")
	}
	silent := &fakeModel{name: "silent", fn: func(int, llm.Request) (llm.Response, error) {
		return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "hello world"}}, nil
	}}
	g, _, _ := newGateway(t, gateway.Config{Chain: []llm.Model{silent}, Tokenizer: tk})
	r, err := g.Generate(context.Background(), ask("hello world"))
	if err != nil || r.Usage.CompletionTokens != 4+2 || r.Usage.PromptTokens != (4+1)+(4+2) {
		t.Fatalf("usage %+v %v", r.Usage, err)
	}
}
