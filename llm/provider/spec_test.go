package provider_test

import (
	"context"
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
