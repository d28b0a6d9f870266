package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
)

// A real `node run` against an OpenAI-compatible server: the API key and a bearer
// token the user pasted into the task must appear in no event, no database file and
// no log line, even when the model echoes them.
func TestNoSecretInEventsOrLogs(t *testing.T) {
	const key = "sk-troupe-test-0123456789abcdefSECRET"
	const token = "Bearer eyJhbGciOiJIUzI1NiJ9.c2VjcmV0LXRva2Vu.AbCdEfGhIjKlMnOp"
	srv := openaitest.NewServer(t, openaitest.Sequence(
		openaitest.Completion(messages.ChatMessage{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "calculator", Arguments: `{"expression":"6*7"}`}}}, messages.Usage{PromptTokens: 50, CompletionTokens: 10}),
		openaitest.Completion(messages.ChatMessage{Content: "42 (and your key " + key + " works)"}, messages.Usage{PromptTokens: 70, CompletionTokens: 12}),
	))
	for _, v := range []string{"OPENAI_API_KEY", "DEEPSEEK_API_KEY", "DASHSCOPE_API_KEY", "ZHIPU_API_KEY", "MOONSHOT_API_KEY", "SILICONFLOW_API_KEY", "MODELSCOPE_API_KEY", "TROUPE_LLM_PROVIDER"} {
		t.Setenv(v, "")
	}
	t.Setenv("LLM_API_KEY", key)
	t.Setenv("LLM_BASE_URL", srv.URL+"/v1")
	t.Setenv("LLM_MODEL", "fake-model")
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"run", "-v", "--data", dir, "What is 6*7? My token: " + token}, &out, &errb, options{})
	if code != 0 || !strings.Contains(out.String(), "answer: 42") {
		t.Fatalf("run: %d\n%s\n%s", code, out.String(), errb.String())
	}
	reqs := srv.Requests()
	if len(reqs) != 2 || !strings.Contains(reqs[0].Header.Get("Authorization"), key) {
		t.Fatalf("the server must have been called with the key: %d requests", len(reqs))
	}
	if strings.Contains(string(reqs[0].Body), "eyJhbGciOiJIUzI1NiJ9") {
		t.Fatal("the user's token reached the model")
	}
	haystacks := map[string][]byte{"stdout": out.Bytes(), "logs": errb.Bytes()}
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil {
			haystacks[f] = b
		}
	}
	for name, b := range haystacks {
		for _, secret := range []string{key, "eyJhbGciOiJIUzI1NiJ9.c2VjcmV0LXRva2Vu"} {
			if bytes.Contains(b, []byte(secret)) {
				t.Errorf("%s contains a secret", name)
			}
		}
	}
	if !strings.Contains(out.String(), "[REDACTED]") {
		t.Fatalf("the echoed key should show as [REDACTED]:\n%s", out.String())
	}
}

// `ZHIPU_API_KEY=… node run --model offline "echo $ZHIPU_API_KEY"`: the key of a
// provider that is not even in use must appear in no output and no byte of the data
// directory — nor must any other key variable's value, shaped like a key or not.
func TestEveryKeyVariableIsRedactedWhateverTheModel(t *testing.T) {
	clearLLMEnv(t)
	keys := map[string]string{
		"ZHIPU_API_KEY":    "3f9a0c2e8b7d41f6a5c3e2d1b0a98765.Zk4PqR7sT2uV9wXy",
		"MOONSHOT_API_KEY": "moonshot-plain-value-6c1f", // shaped like nothing: redacted by value
		"LLM_API_KEY":      "generic-plain-value-77aa",
		"HOUSE_KEY":        "house-plain-value-91bd", // named by llm.api_key_env
	}
	var input strings.Builder
	input.WriteString("echo")
	for k, v := range keys {
		t.Setenv(k, v)
		input.WriteString(" " + v)
	}
	dir := t.TempDir()
	config := filepath.Join(dir, "troupe.json")
	if err := os.WriteFile(config, []byte(`{"llm": {"api_key_env": "HOUSE_KEY"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"run", "-v", "--config", config, "--model", "offline", "--data", data, input.String()}, &out, &errb, options{})
	if code != 0 {
		t.Fatalf("run: %d\n%s\n%s", code, out.String(), errb.String())
	}
	haystacks := map[string][]byte{"stdout": out.Bytes(), "logs": errb.Bytes()}
	err := filepath.WalkDir(data, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		haystacks[path] = b
		return err
	})
	if err != nil || len(haystacks) < 3 {
		t.Fatalf("data directory: %v (%d files)", err, len(haystacks)-2)
	}
	for name, b := range haystacks {
		for k, v := range keys {
			if n := bytes.Count(b, []byte(v)); n > 0 {
				t.Errorf("%s holds %s %d times", name, k, n)
			}
		}
	}
	if !strings.Contains(out.String(), "[REDACTED]") {
		t.Fatalf("the echoed keys should show as [REDACTED]:\n%s", out.String())
	}
}
