package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
)

// streamingProvider points the node's model flags (LLM_* variables) at a fake
// OpenAI-compatible server that streams pieces to a request that asks to stream, and
// answers them whole to one that does not.
func streamingProvider(t *testing.T, key string, pieces ...string) *openaitest.Server {
	t.Helper()
	srv := openaitest.NewServer(t, func(r openaitest.Request) openaitest.Reply {
		var body struct {
			Stream bool `json:"stream"`
		}
		_ = json.Unmarshal(r.Body, &body)
		u := messages.Usage{PromptTokens: 30, CompletionTokens: len(pieces)}
		if body.Stream {
			return openaitest.TextStream(u, pieces...)
		}
		return openaitest.Completion(messages.ChatMessage{Content: strings.Join(pieces, "")}, u)
	})
	for _, v := range []string{"OPENAI_API_KEY", "DEEPSEEK_API_KEY", "DASHSCOPE_API_KEY", "ZHIPU_API_KEY", "MOONSHOT_API_KEY", "SILICONFLOW_API_KEY", "MODELSCOPE_API_KEY", "TROUPE_LLM_PROVIDER", "TROUPE_STREAM"} {
		t.Setenv(v, "")
	}
	t.Setenv("LLM_API_KEY", key)
	t.Setenv("LLM_BASE_URL", srv.URL+"/v1")
	t.Setenv("LLM_MODEL", "fake-model")
	return srv
}

// node run --stream on prints the answer's text as it streams, on lines of its own
// before the answer's step line, then the usual lines; a key the model streams in
// pieces is redacted there as in the events. --stream off (and a stdout that is not
// a terminal, as here, with auto) asks the provider for no stream at all.
func TestRunPrintsStreamedText(t *testing.T) {
	const key = "sk-troupe-test-0123456789abcdefSECRET"
	pieces := []string{"Twelve ", "times ", "twelve ", "is ", "144; ", "your ", "key ", key[:8], key[8:], " works.\n", "Bye."}
	srv := streamingProvider(t, key, pieces...)
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"run", "--data", t.TempDir(), "--stream", "on", "What is 12*12?"}, &out, &errb, options{})
	if code != 0 {
		t.Fatalf("run: %d\n%s\n%s", code, out.String(), errb.String())
	}
	text := out.String()
	streamed := "  │ Twelve times twelve is 144; your key [REDACTED] works.\n  ["
	i, j := strings.Index(text, streamed), strings.Index(text, "model fake-model → answer")
	if i < 0 || j < i || !strings.Contains(text, "answer: Twelve times twelve is 144") {
		t.Fatalf("node run did not print the streamed text before the answer:\n%s", text)
	}
	if strings.Contains(text, key[8:]) {
		t.Fatalf("the streamed key reached the terminal:\n%s", text)
	}
	if body := srv.Requests()[0].JSON(t); body["stream"] != true {
		t.Errorf("the model call did not stream: %v", body["stream"])
	}

	for _, args := range [][]string{{"--stream", "off"}, {}} {
		srv := streamingProvider(t, key, pieces...)
		out.Reset()
		code := run(context.Background(), append(append([]string{"run", "--data", t.TempDir()}, args...), "What is 12*12?"), &out, &errb, options{})
		if code != 0 || strings.Contains(out.String(), "│") {
			t.Fatalf("run %v: %d, printed streamed text:\n%s", args, code, out.String())
		}
		if body := srv.Requests()[0].JSON(t); body["stream"] == true {
			t.Errorf("run %v: the model call streamed", args)
		}
	}
}
