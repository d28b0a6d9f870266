package provider_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/provider"
)

func TestFromSpec(t *testing.T) {
	env := func(string) string { return "" }
	ctx := context.Background()
	m, why, key, err := provider.FromSpec(ctx, "offline", provider.Config{}, env)
	if err != nil || m.Name() != llm.OfflineName || why == "" || key != "" {
		t.Fatalf("offline: %v %q %q %v", m, why, key, err)
	}
	// node run prints why: the spec came from the flag, TROUPE_MODEL, the file or an
	// agent's model, so the sentence must not say it was the flag.
	if strings.Contains(why, "--model") {
		t.Errorf("offline: why %q names --model, which may not be where the spec came from", why)
	}
	if _, _, _, err := provider.FromSpec(ctx, "teleport:gpt", provider.Config{}, env); err == nil || !strings.Contains(err.Error(), "is not a model spec") {
		t.Fatalf("unknown provider: %v", err)
	}
	if _, _, _, err := provider.FromSpec(ctx, "scripted:/no/such/file.json", provider.Config{}, env); err == nil {
		t.Fatal("a missing script must be an error")
	}
	keyed := func(k string) string {
		if k == "DEEPSEEK_API_KEY" {
			return "sk-deepseek-test-key-000000"
		}
		return ""
	}
	m, _, key, err = provider.FromSpec(ctx, "deepseek:deepseek-reasoner", provider.Config{}, keyed)
	if err != nil || m.Name() != "deepseek-reasoner" || key != "sk-deepseek-test-key-000000" {
		t.Fatalf("deepseek: %v %q %v", m, key, err)
	}
	if _, _, _, err := provider.FromSpec(ctx, "openai", provider.Config{}, keyed); err == nil {
		t.Fatal("a named provider without its key must be an error, not a silent fallback")
	}
}

// EmbedderFromSpec resolves a spec as FromSpec does and returns that provider's
// embedder: the offline one for offline and scripted models, none for a provider
// without an embedding model.
func TestEmbedderFromSpec(t *testing.T) {
	ctx := context.Background()
	for _, spec := range []string{"offline", "scripted:x.json"} {
		if e, key, err := provider.EmbedderFromSpec(ctx, spec, provider.Config{}, envOf()); err != nil || key != "" {
			t.Errorf("%s: %v %q %v", spec, e, key, err)
		} else if _, ok := e.(llm.HashingEmbedder); !ok {
			t.Errorf("%s: embedder %T, want llm.HashingEmbedder", spec, e)
		}
	}
	e, key, err := provider.EmbedderFromSpec(ctx, "openai", provider.Config{}, envOf("OPENAI_API_KEY", "sk-test"))
	if err != nil || e == nil || key != "sk-test" {
		t.Errorf("openai: %T %q %v", e, key, err)
	}
	if _, _, err := provider.EmbedderFromSpec(ctx, "deepseek", provider.Config{}, envOf("DEEPSEEK_API_KEY", "d")); !errors.Is(err, provider.ErrNoEmbedder) {
		t.Errorf("deepseek: %v, want ErrNoEmbedder", err)
	}
	if _, _, err := provider.EmbedderFromSpec(ctx, "teleport:gpt", provider.Config{}, envOf()); err == nil {
		t.Error("an unknown provider: no error")
	}
}
