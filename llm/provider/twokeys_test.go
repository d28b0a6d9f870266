package provider_test

import (
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm/provider"
)

// Two providers' keys at once: the first in the documented order is chosen, and
// the reason node run prints says so, naming the key left unused and how to choose
// the other; it said only "DEEPSEEK_API_KEY is set", and a user who had set
// MOONSHOT_API_KEY for this node learnt from nothing that it went unused.
func TestDetectNamesTheKeysItDidNotUse(t *testing.T) {
	r := detect(t, envOf("MOONSHOT_API_KEY", "m", "DEEPSEEK_API_KEY", "d"))
	if r.Provider != provider.DeepSeek || r.APIKey != "d" {
		t.Fatalf("%v", r)
	}
	for _, want := range []string{"DEEPSEEK_API_KEY is set", "MOONSHOT_API_KEY is set too and not used", "--model", provider.EnvProvider} {
		if !strings.Contains(r.Reason, want) {
			t.Errorf("reason %q does not say %q", r.Reason, want)
		}
	}
	// The user's own key, beside a provider's, is not used either: it says so.
	if r := detect(t, envOf("OPENAI_API_KEY", "o", "LLM_API_KEY", "l")); r.APIKey != "o" || !strings.Contains(r.Reason, "LLM_API_KEY is set too and not used") {
		t.Errorf("reason %q (key %v)", r.Reason, r.APIKey == "o")
	}
	// One key: nothing more to say.
	if r := detect(t, envOf("DEEPSEEK_API_KEY", "d")); r.Reason != "DEEPSEEK_API_KEY is set" {
		t.Errorf("reason %q", r.Reason)
	}
}
