package redact

import "testing"

// A credential's shape after an underscore is inside an identifier, as after a
// letter: an MCP server's tool is named "<server>__<tool>", and a tool
// "sk-learn-linear-regression" of server "ml" was redacted out of the answer of
// search_tools that found it ("loaded":["ml__[REDACTED]"]), so the session never
// offered it and the model never read its name. A key after a quote, a blank, an
// equals sign or an escape is still one.
func TestShapesInsideIdentifiersStay(t *testing.T) {
	r := New()
	for _, in := range []string{
		`{"loaded":["ml__sk-learn-linear-regression"]}`,
		`{"tool":"ml__sk-learn-linear-regression","arguments":"{}"}`,
	} {
		if got := r.String(in); got != in {
			t.Errorf("String(%s) = %s", in, got)
		}
	}
	for in, want := range map[string]string{
		`{"key":"sk-proj-abcdefghijklmnop1234"}`:      `{"key":"[REDACTED]"}`,
		`OPENAI_API_KEY=sk-proj-abcdefghijklmnop1234`: `OPENAI_API_KEY=[REDACTED]`,
		`key: sk-proj-abcdefghijklmnop1234`:           `key: [REDACTED]`,
		`{"log":"a\nsk-proj-abcdefghijklmnop1234"}`:   `{"log":"a\n[REDACTED]"}`,
	} {
		if got := r.String(in); got != want {
			t.Errorf("String(%s) = %s, want %s", in, got, want)
		}
	}
}

// Only the MCP separator "__" joins a credential's shape to a name: after a single
// underscore, as in a variable or a key spelled with one ("token_sk-…", "api_key_eyJ…",
// "SLACK_xoxb-…"), it is still a credential, as it was before names were exempt.
func TestShapesAfterSingleUnderscoreRedacted(t *testing.T) {
	r := New()
	for in, want := range map[string]string{
		`token_sk-proj-abcdefghijklmnop1234`:                             `token_[REDACTED]`,
		`{"api_key_sk-proj-abcdefghijklmnop1234":1}`:                     `{"api_key_[REDACTED]":1}`,
		`id_token_eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJl`: `id_token_[REDACTED]`,
		`SLACK_xoxb-123456789012-1234567890123-abcdefghijklmnop`:         `SLACK_[REDACTED]`,
	} {
		if got := r.String(in); got != want {
			t.Errorf("String(%s) = %s, want %s", in, got, want)
		}
	}
}
