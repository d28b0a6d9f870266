package gateway_test

import (
	"context"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/pipelines/bpe/bpetest"
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

// TestTiktokenCountsAsTiktokenGo compares each encoding's counts with
// tiktoken-go's on a few texts, one of them not valid UTF-8.
func TestTiktokenCountsAsTiktokenGo(t *testing.T) {
	texts := []string{"hello world", "tiktoken is great!", "HTTPServer's state'LL be: {\"a\": [1, 22, 333]}\n\n  — 数据 처리 🙂",
		"<|endoftext|> stays text", "a\xffb\xc3 \xe2\x82!", strings.Repeat("ab<", 200)}
	for _, enc := range []string{"cl100k_base", "o200k_base", "p50k_base", "r50k_base"} {
		slow, err := bpetest.New(enc)
		if err != nil {
			t.Fatal(err)
		}
		lazy := &gateway.LazyTiktoken{Encoding: enc}
		for _, text := range texts {
			if got, want := lazy.Count(text), slow.Count(text); got != want {
				t.Errorf("%s: %.40q: %d tokens, tiktoken-go %d", enc, text, got, want)
			}
		}
	}
}

// TestTiktokenCountsHugeTexts counts texts of 1 MiB in o200k_base and
// cl100k_base: one unbroken run of letters (tiktoken-go's merges take time that
// grows with the square of its length: half an hour), and a run of special
// tokens (tiktoken-go's Encode copies the rest of the text for each one it
// passes over, as long again). Each text is a part repeated 256 times, and its
// count is checked against tiktoken-go's counts of one part and of two: the first
// part's tokens, then 255 times what each part after it adds.
func TestTiktokenCountsHugeTexts(t *testing.T) {
	for _, enc := range []string{"o200k_base", "cl100k_base"} {
		slow, err := bpetest.New(enc)
		if err != nil {
			t.Fatal(err)
		}
		lazy := &gateway.LazyTiktoken{Encoding: enc}
		for name, unit := range map[string]string{"letters": "a", "special": "<|endoftext|>"} {
			t.Run(enc+"/"+name, func(t *testing.T) {
				part := strings.Repeat(unit, (1<<20)/256/len(unit))
				one, two := slow.Count(part), slow.Count(part+part)
				if got, want := lazy.Count(strings.Repeat(part, 256)), one+255*(two-one); got != want {
					t.Errorf("1 MiB of %q: %d tokens, want %d", unit, got, want)
				}
			})
		}
	}
}
