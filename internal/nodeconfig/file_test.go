package nodeconfig

import (
	"context"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/provider"
)

// shortDuration cuts zero units whole: 10m0s is 10m, not 1.
func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		10 * time.Minute: "10m", 720 * time.Hour: "720h", time.Hour + 30*time.Minute: "1h30m",
		time.Second: "1s", 100 * time.Millisecond: "100ms", 90 * time.Second: "1m30s", 20 * time.Hour: "20h",
	} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%s) = %q, want %q", d, got, want)
		}
	}
}

// tool_embedder gives search disclosure an embedder: the offline one for hashing,
// and for llm the one of the model's provider (the offline one for the offline model).
func TestNewToolEmbedder(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		file, spec string
		hashing    bool
	}{
		{"", "offline", false},
		{ToolEmbedderHashing, "auto", true},
		{ToolEmbedderLLM, "offline", true},
		{ToolEmbedderLLM, "scripted:x.json", true},
	} {
		e, key, err := File{Disclosure: "search", ToolEmbedder: c.file}.NewToolEmbedder(ctx, c.spec, provider.Config{})
		if err != nil || key != "" {
			t.Fatalf("%q on %s: %v %q", c.file, c.spec, err, key)
		}
		if _, ok := e.(llm.HashingEmbedder); ok != c.hashing || !c.hashing && e != nil {
			t.Errorf("%q on %s: embedder %T", c.file, c.spec, e)
		}
	}
	if err := (File{Disclosure: "search", ToolEmbedder: "llm"}).Validate(); err != nil {
		t.Errorf("llm with search: %v", err)
	}
}
