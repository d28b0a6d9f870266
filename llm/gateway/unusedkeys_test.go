package gateway_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
)

// A price or a concurrency limit keyed by a name that no model of the gateway has
// (a typo, "deepseek-chta"; a provider's name where a model's is wanted) is never
// applied: every call of the model meant costs 0 and reaches no cost budget, or
// runs under the default 64 slots. The gateway says so in its log as it starts,
// naming the key and the names it knows; it kept silent.
func TestPricesAndLimitsOfNoModelAreLogged(t *testing.T) {
	var log bytes.Buffer
	m := &fakeModel{name: "deepseek-chat", fn: func(int, llm.Request) (llm.Response, error) { return answer("ok"), nil }}
	_, err := gateway.New(gateway.Config{Chain: []llm.Model{m},
		Prices:      map[string]gateway.Price{"deepseek-chta": {Prompt: 1}, "deepseek-chat": {Prompt: 2}},
		Concurrency: map[string]int{"deepseak": 4, "deepseek-chat": 8},
		Logger:      slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	out := log.String()
	for _, want := range []string{"deepseek-chta", "deepseak"} {
		if !strings.Contains(out, want) {
			t.Errorf("the log does not name %q, which no model of the gateway has:\n%s", want, out)
		}
	}
	for _, known := range []string{"price=deepseek-chat", "concurrency=deepseek-chat"} {
		if strings.Contains(out, known) {
			t.Errorf("a key the gateway's model has is logged as unknown (%s):\n%s", known, out)
		}
	}
}
