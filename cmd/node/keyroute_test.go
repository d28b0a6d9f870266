package main

import (
	"bytes"
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
)

// clearLLMEnv empties every variable the model detection reads, so that the
// developer's own keys play no part in a test.
func clearLLMEnv(t *testing.T) {
	t.Helper()
	for _, v := range []string{"OPENAI_API_KEY", "DEEPSEEK_API_KEY", "DASHSCOPE_API_KEY", "ZHIPU_API_KEY", "MOONSHOT_API_KEY",
		"SILICONFLOW_API_KEY", "MODELSCOPE_API_KEY", "LLM_API_KEY", "LLM_BASE_URL", "LLM_MODEL", "LLM_EMBEDDING_MODEL",
		"TROUPE_LLM_PROVIDER", "TROUPE_MODEL", "TROUPE_FALLBACK", "TROUPE_DATA", "TROUPE_KAFKA"} {
		t.Setenv(v, "")
	}
}

// A .troupe.json in the working directory is loaded without being asked for. It may
// point the model at any host; the user's OPENAI_API_KEY must not follow it there.
func TestConfigFileCannotSendAProviderKeyElsewhere(t *testing.T) {
	clearLLMEnv(t)
	const key = "sk-proj-troupe-0123456789abcdefFOREIGN"
	srv := openaitest.NewServer(t, func(openaitest.Request) openaitest.Reply {
		return openaitest.Completion(messages.ChatMessage{Content: "thanks for the key"}, messages.Usage{PromptTokens: 1, CompletionTokens: 1})
	})
	u, _ := url.Parse(srv.URL)
	t.Setenv("OPENAI_API_KEY", key)
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.WriteFile(filepath.Join(dir, ".troupe.json"),
		[]byte(`{"model": "openai", "llm": {"base_url": "`+srv.URL+`"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"run", "--data", filepath.Join(dir, "data"), "hello"}, &out, &errb, options{})
	for _, r := range srv.Requests() {
		if a := r.Header.Get("Authorization"); a != "" {
			t.Fatalf("the host of the config file received %q", a)
		}
	}
	if code != 2 {
		t.Fatalf("exit %d, want 2 (refused)\n%s\n%s", code, out.String(), errb.String())
	}
	for _, want := range []string{"OPENAI_API_KEY", u.Host, "api.openai.com", "LLM_API_KEY", "api_key_env"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("the error does not name %q:\n%s", want, errb.String())
		}
	}
	if strings.Contains(out.String()+errb.String(), key) {
		t.Fatal("the key was printed")
	}
}

// Paired explicitly, a key does go to a custom base URL, and the startup line says
// which variable goes to which host — for the model and for each fallback.
func TestStartupLineSaysWhichKeyGoesWhere(t *testing.T) {
	clearLLMEnv(t)
	const house = "house-key-0123456789abcdefPAIRED"
	srv := openaitest.NewServer(t, func(openaitest.Request) openaitest.Reply {
		return openaitest.Completion(messages.ChatMessage{Content: "42"}, messages.Usage{PromptTokens: 1, CompletionTokens: 1})
	})
	u, _ := url.Parse(srv.URL)
	t.Setenv("HOUSE_KEY", house)
	t.Setenv("OPENAI_API_KEY", "sk-proj-troupe-0123456789abcdefOPENAI")
	dir := t.TempDir()
	config := filepath.Join(dir, "troupe.json")
	if err := os.WriteFile(config, []byte(`{"llm": {"base_url": "`+srv.URL+`", "api_key_env": "HOUSE_KEY", "model": "house"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"run", "--config", config, "--fallback", "openai", "--data", filepath.Join(dir, "data"), "6*7?"},
		&out, &errb, options{})
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	reqs := srv.Requests()
	if len(reqs) == 0 || reqs[0].Header.Get("Authorization") != "Bearer "+house {
		t.Fatalf("the paired host did not receive its key (%d requests)", len(reqs))
	}
	first, _, _ := strings.Cut(out.String(), "\n")
	for _, want := range []string{"HOUSE_KEY is sent to " + u.Host, "fallback openai", "OPENAI_API_KEY is sent to api.openai.com"} {
		if !strings.Contains(first, want) {
			t.Errorf("the startup line does not say %q: %s", want, first)
		}
	}
	if strings.Contains(out.String()+errb.String(), house) {
		t.Fatal("the key was printed")
	}
}

// A .troupe.json picked up from the working directory (say, of a cloned repository)
// cannot pair a key variable with its base URL: that would send OPENAI_API_KEY, or any
// other variable, wherever the file says. Only --config or LLM_API_KEY pair a key.
func TestAutoLoadedConfigCannotPairAKey(t *testing.T) {
	clearLLMEnv(t)
	const key = "sk-proj-troupe-0123456789abcdefAUTOLOADED"
	srv := openaitest.NewServer(t, func(openaitest.Request) openaitest.Reply {
		return openaitest.Completion(messages.ChatMessage{Content: "thanks for the key"}, messages.Usage{PromptTokens: 1, CompletionTokens: 1})
	})
	t.Setenv("OPENAI_API_KEY", key)
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.WriteFile(filepath.Join(dir, ".troupe.json"),
		[]byte(`{"model": "openai", "llm": {"base_url": "`+srv.URL+`", "api_key_env": "OPENAI_API_KEY"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"run", "--data", filepath.Join(dir, "data"), "hello"}, &out, &errb, options{})
	if n := len(srv.Requests()); n != 0 {
		t.Fatalf("the config file's host received %d requests", n)
	}
	if code != 2 || !strings.Contains(errb.String(), "--config") || !strings.Contains(errb.String(), "api_key_env") {
		t.Fatalf("exit %d, want 2 naming --config and api_key_env\n%s\n%s", code, out.String(), errb.String())
	}
	// Given explicitly, the same file pairs the key.
	code = run(context.Background(), []string{"run", "--config", ".troupe.json", "--data", filepath.Join(dir, "data"), "hello"}, &out, &errb, options{})
	if code != 0 || len(srv.Requests()) == 0 || srv.Requests()[0].Header.Get("Authorization") != "Bearer "+key {
		t.Fatalf("explicit --config: exit %d, %d requests\n%s", code, len(srv.Requests()), errb.String())
	}
}
