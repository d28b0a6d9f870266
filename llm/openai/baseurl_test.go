package openai_test

import (
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
)

// A base URL that is the chat endpoint itself (pasted from a provider's page) is
// refused when the model is built, saying which base URL to give: every call went
// to .../chat/completions/chat/completions and failed "HTTP 404: Not Found".
func TestBaseURLThatIsTheEndpointIsRefused(t *testing.T) {
	for _, base := range []string{"https://api.example.com/v1/chat/completions", "https://api.example.com/v1/chat/completions/", "https://api.example.com/v1/embeddings"} {
		_, err := openai.New(openai.Config{Provider: "p", BaseURL: base, Model: "m"})
		if err == nil || !strings.Contains(err.Error(), `"https://api.example.com/v1"`) {
			t.Errorf("%s: %v, want a refusal naming https://api.example.com/v1", base, err)
		}
		_, err = openai.NewEmbedder(openai.EmbedderConfig{Provider: "p", BaseURL: base, Model: "m"})
		if err == nil || !strings.Contains(err.Error(), `"https://api.example.com/v1"`) {
			t.Errorf("embedder %s: %v, want a refusal naming https://api.example.com/v1", base, err)
		}
	}
}

// The base URL a refusal of an endpoint's URL suggests keeps its query (Azure's
// api-version, without which every call fails), its secrets redacted: it was
// dropped, so the base URL suggested was refused by the server in turn.
func TestBaseURLThatIsTheEndpointKeepsItsQuery(t *testing.T) {
	const base = "https://x.openai.azure.com/openai/deployments/gpt/chat/completions?api-version=2024-02-01&api_key=QSECRET1234567890abc"
	_, err := openai.New(openai.Config{Provider: "p", BaseURL: base, Model: "m"})
	if err == nil || !strings.Contains(err.Error(), `"https://x.openai.azure.com/openai/deployments/gpt?api-version=2024-02-01&api_key=[REDACTED]"`) ||
		strings.Contains(err.Error(), "QSECRET") {
		t.Fatalf("%v, want the base URL with its query, its key redacted", err)
	}
	_, err = openai.New(openai.Config{Provider: "p", BaseURL: "ftp://x.example.com/v1?api_key=QSECRET1234567890abc", Model: "m"})
	if err == nil || strings.Contains(err.Error(), "QSECRET") {
		t.Fatalf("%v, want a refusal without the key", err)
	}
}

// A 404 of the chat endpoint says what it most often means: the base URL is not
// the API's (one without its /v1), or the model is not served there. The error
// said "HTTP 404: Not Found" and nothing more.
func TestNotFoundSaysTheBaseURLMayBeWrong(t *testing.T) {
	srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Reply{Status: 404, Body: `{"detail":"Not Found"}`}))
	m := newModel(t, srv, func(c *openai.Config) { c.Timeout = 5 * time.Second })
	err := generate(t, m)
	if api := apiError(t, err); api.StatusCode != 404 || api.Message != "Not Found" {
		t.Fatalf("%+v", api)
	}
	if !strings.Contains(err.Error(), "base URL") || !strings.Contains(err.Error(), "/v1") {
		t.Fatalf("%v: want a hint at the base URL", err)
	}
}
