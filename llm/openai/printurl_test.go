package openai_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm/openai"
)

// The query of a base URL may hold a key under any name (a gateway's ?api-key=,
// Azure Functions' ?code=, a signature): Config, EmbedderConfig, Model, Embedder
// and Endpoint print it with every value hidden, its names kept, whatever the
// names; they printed it whole, hidden only where a log's redaction knew the name.
// Endpoint still tells two queries apart (their rate limits are two).
func TestBaseURLQueryValuesAreNotPrinted(t *testing.T) {
	const key, code = "gw-7d1e93ab55c04f", "fn-c0de-4f2a9b71e8"
	base := "https://gw.example.com/v1?api-version=2024-02-01&api-key=" + key + "&code=" + code
	cfg := openai.Config{Provider: "gw", BaseURL: base, Model: "m", APIKey: testKey}
	m, err := openai.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ecfg := openai.EmbedderConfig{Provider: "gw", BaseURL: base, Model: "e"}
	e, err := openai.NewEmbedder(ecfg)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	log := slog.New(slog.NewTextHandler(&out, nil))
	for _, v := range []any{cfg, &cfg, ecfg, m, *m, e} {
		for _, verb := range []string{"%v", "%+v", "%s"} {
			fmt.Fprintf(&out, verb+"\n", v)
		}
		log.Info("value", "v", v)
	}
	out.WriteString(m.Endpoint() + "\n")
	for _, secret := range []string{key, code, "2024-02-01", testKey} {
		if strings.Contains(out.String(), secret) {
			t.Errorf("%q printed:\n%s", secret, out.String())
		}
	}
	if !strings.Contains(out.String(), "https://gw.example.com/v1?api-version=") || !strings.Contains(out.String(), "&code=") {
		t.Errorf("the base URL and its query's names are not printed:\n%s", out.String())
	}
	cfg.BaseURL = strings.Replace(base, code, "another", 1)
	other, err := openai.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if other.Endpoint() == m.Endpoint() {
		t.Errorf("two queries, one endpoint: %s", m.Endpoint())
	}
}
