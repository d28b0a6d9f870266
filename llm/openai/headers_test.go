package openai_test

import (
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm/openai"
)

// An API key or an extra header that holds a character no header can carry (a
// newline from a pasted key) is refused when the model is built, without printing
// the key, rather than failing every call as a transient error that the gateway
// retries.
func TestKeyThatNoHeaderCanCarryIsRefused(t *testing.T) {
	for name, edit := range map[string]func(*openai.Config){
		"key":    func(c *openai.Config) { c.APIKey = testKey + "\n" },
		"header": func(c *openai.Config) { c.ExtraHeaders = map[string]string{"Api-Key": testKey + "\r\nX-Evil: 1"} },
	} {
		cfg := openai.Config{BaseURL: "http://127.0.0.1:1/v1", Model: "m"}
		edit(&cfg)
		_, err := openai.New(cfg)
		if err == nil || strings.Contains(err.Error(), testKey) {
			t.Errorf("%s: New: %v: want a refusal that does not print the key", name, err)
		}
		_, err = openai.NewEmbedder(openai.EmbedderConfig{BaseURL: cfg.BaseURL, Model: "e", APIKey: cfg.APIKey, ExtraHeaders: cfg.ExtraHeaders})
		if err == nil || strings.Contains(err.Error(), testKey) {
			t.Errorf("%s: NewEmbedder: %v: want a refusal that does not print the key", name, err)
		}
	}
}
