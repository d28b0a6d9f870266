package provider_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/llm/provider"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), ".troupe.json")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadLayers(t *testing.T) {
	// Defaults only.
	cfg, err := provider.Load("", envOf())
	if err != nil || cfg.Timeout != openai.DefaultTimeout || cfg.Provider != "" {
		t.Fatalf("%v %v", cfg, err)
	}

	// The file, as the "llm" section of a larger configuration.
	path := writeFile(t, `{"node": {"listen": ":8080"}, "llm": {"provider": "deepseek", "model": "deepseek-reasoner",
		"timeout": "45s", "api_key_env": "MY_DS_KEY", "extra_headers": {"X-Team": "agents"}}}`)
	cfg, err = provider.Load(path, envOf("MY_DS_KEY", "from-named-var"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Provider != "deepseek" || cfg.Model != "deepseek-reasoner" || cfg.Timeout != 45*time.Second ||
		cfg.APIKey != "from-named-var" || cfg.ExtraHeaders["X-Team"] != "agents" {
		t.Fatalf("file: %v %v", cfg, cfg.ExtraHeaders)
	}

	// The environment overrides the file.
	cfg, err = provider.Load(path, envOf("TROUPE_LLM_PROVIDER", "qwen", "LLM_MODEL", "qwen-max", "LLM_TIMEOUT", "10s",
		"DASHSCOPE_API_KEY", "ds"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Provider != "qwen" || cfg.Model != "qwen-max" || cfg.Timeout != 10*time.Second {
		t.Fatalf("env: %v", cfg)
	}
	r, err := provider.Detect(deadline(t), cfg, envOf("DASHSCOPE_API_KEY", "ds"), noLocal())
	if err != nil || r.Provider != provider.Qwen || r.Model != "qwen-max" || r.APIKey != "ds" || r.ExtraHeaders["X-Team"] != "agents" {
		t.Fatalf("detect: %+v %v", r, err)
	}

	// A file that is the LLM section itself.
	path = writeFile(t, `{"base_url": "http://127.0.0.1:11434/v1", "model": "qwen2.5:7b", "disable_probe": true}`)
	cfg, err = provider.Load(path, envOf())
	if err != nil || cfg.BaseURL != "http://127.0.0.1:11434/v1" || !cfg.DisableProbe {
		t.Fatalf("%v %v", cfg, err)
	}
	r, err = provider.Detect(deadline(t), cfg, envOf(), noLocal())
	if err != nil || r.Provider != provider.Ollama || r.Model != "qwen2.5:7b" {
		t.Fatalf("%+v %v", r, err)
	}
}

func TestLoadErrors(t *testing.T) {
	if _, err := provider.Load(filepath.Join(t.TempDir(), "missing.json"), envOf()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	for name, c := range map[string]struct{ body, want string }{
		"empty":            {``, "empty"},
		"not json":         {`provider: openai`, "invalid character"},
		"typo":             {`{"llm": {"modle": "gpt-4o"}}`, `unknown field "llm.modle"`},
		"bad timeout":      {`{"timeout": "forever"}`, `timeout: "forever" is not a duration`},
		"long timeout":     {`{"llm": {"timeout": "3h"}}`, `llm.timeout: "3h" is out of range: want 1s to 1h`},
		"unknown provider": {`{"provider": "acme"}`, `provider: "acme" is not known`},
		"bad url":          {`{"base_url": "localhost:11434"}`, `base_url: "localhost:11434"`},
		"bad key variable": {`{"llm": {"api_key_env": "$KEY"}}`, `llm.api_key_env: "$KEY"`},
		"bad header":       {`{"llm": {"extra_headers": {"X-A": "1\nX-B: 2"}}}`, "llm.extra_headers"},
	} {
		cfg, err := provider.Load(writeFile(t, c.body), envOf())
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: loaded %v, error %v; want one saying %s", name, cfg, err, c.want)
		}
	}
	if _, err := provider.Load("", envOf("LLM_TIMEOUT", "-5s")); err == nil {
		t.Error("a negative timeout was accepted")
	}
}

func TestLookupAndHosts(t *testing.T) {
	for alias, want := range map[string]string{"dashscope": "qwen", "Kimi": "moonshot", "GLM": "zhipu", " openai ": "openai"} {
		if p, ok := provider.Lookup(alias); !ok || p.Name != want {
			t.Errorf("%q: %v %v", alias, p.Name, ok)
		}
	}
	for _, p := range provider.Providers() {
		got, ok := provider.ByBaseURL(p.BaseURL)
		if !ok || got.Name != p.Name {
			t.Errorf("%s: its own base URL maps to %q", p.Name, got.Name)
		}
		if p.Local == (p.KeyEnv != "") {
			t.Errorf("%s: local providers need no key, remote ones do", p.Name)
		}
	}
	if _, ok := provider.ByBaseURL("http://192.168.1.9:11434/v1"); ok {
		t.Error("a remote host on Ollama's port is not a local Ollama")
	}
}
