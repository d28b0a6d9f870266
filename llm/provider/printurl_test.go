package provider_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm/provider"
)

// The query of a base URL may hold a key under any name (Azure Functions' ?code=,
// a gateway's ?api-key=): Config and Resolved print it (String, fmt, slog, JSON)
// with every value hidden and its names kept, as the model and its configuration do.
func TestBaseURLQueryValuesAreNotPrinted(t *testing.T) {
	const code = "fn-c0de-4f2a9b71e8"
	base := "https://gw.example.com/v1?api-version=2024-02-01&code=" + code
	cfg, err := provider.Load("", envOf("LLM_API_KEY", "k-1", "LLM_BASE_URL", base, "LLM_MODEL", "m"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := provider.Detect(deadline(t), cfg, envOf("LLM_API_KEY", "k-1"), noLocal())
	if err != nil {
		t.Fatal(err)
	}
	if r.BaseURL != base {
		t.Fatalf("base URL %q, want %q: it is still sent as given", r.BaseURL, base)
	}
	var out bytes.Buffer
	log := slog.New(slog.NewTextHandler(&out, nil))
	for _, v := range []any{cfg, &cfg, r, &r} {
		for _, verb := range []string{"%v", "%+v", "%s"} {
			fmt.Fprintf(&out, verb+"\n", v)
		}
		log.Info("value", "v", v)
		b, _ := json.Marshal(v)
		out.Write(b)
	}
	if strings.Contains(out.String(), code) || strings.Contains(out.String(), "2024-02-01") {
		t.Errorf("a query value printed:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "https://gw.example.com/v1?api-version=") {
		t.Errorf("the base URL is not printed:\n%s", out.String())
	}
}
