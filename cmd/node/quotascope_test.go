package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The node charges each model call to its agent (llm.Scope.Agent) and to nothing
// else: no team nor API key is ever named in a call's scope. A quota of scope
// team:NAME or key:NAME, which the configuration took, never refused a call: a
// budget written by hand that never holds. The node refuses it, saying what it
// can charge.
func TestConfigRefusesQuotasTheNodeNeverCharges(t *testing.T) {
	clearLLMEnv(t)
	for _, scope := range []string{"team:desk", "key:alice"} {
		dir := t.TempDir()
		path := filepath.Join(dir, "troupe.json")
		body := `{"gateway": {"quotas": [{"scope": "agent:*", "tokens": 100000, "window": "1h"}, {"scope": "` + scope + `", "tokens": 1, "window": "1h"}]}}`
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		code := run(context.Background(), []string{"run", "--config", path, "--model", "offline", "--data", filepath.Join(dir, "data"), "What is 2+2?"}, &out, &errb, options{})
		if code != 2 || !strings.Contains(errb.String(), "gateway.quotas[1].scope") || !strings.Contains(errb.String(), scope) {
			t.Errorf("a quota of %s, which no call of the node is charged to: exit %d, want 2 naming gateway.quotas[1].scope\n%s%s", scope, code, out.String(), errb.String())
		}
	}
}
