package redact_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/redact"
)

// A model's tool call carries its arguments as the model's raw JSON text
// (messages.ToolCall.Arguments, a string): JSON lets the model escape any
// character (\u0073 for s, \/ for /), and the tool gets the decoded value. The
// recorded event is redacted as encoded bytes, where the escaped secret is not
// found: a reader that decodes the arguments, as the tool did, gets the secret.
func TestEscapedSecretsInToolArgumentsAreRedacted(t *testing.T) {
	const known = "tok/0123456789/abcdef" // a known secret with a slash (a base64 token)
	const shaped = "sk-proj-0123456789abcdefABCDEF"
	r := redact.New(known)
	for _, args := range []string{
		`{"key":"\u0073k-proj-0123456789abcdefABCDEF"}`, // shaped, its first letter escaped
		`{"token":"tok\/0123456789\/abcdef"}`,           // known, its slashes escaped
	} {
		payload, err := json.Marshal(map[string]string{"name": "http", "arguments": args}) // as tool.requested is encoded
		if err != nil {
			t.Fatal(err)
		}
		var rec struct{ Arguments string }
		if err := json.Unmarshal(r.Bytes(payload), &rec); err != nil {
			t.Fatal(err)
		}
		var decoded map[string]string // as the tool reads them
		if err := json.Unmarshal([]byte(rec.Arguments), &decoded); err != nil {
			t.Fatal(err)
		}
		for _, v := range decoded {
			if strings.Contains(v, known) || strings.Contains(v, shaped) {
				t.Errorf("the recorded arguments %s decode to the secret %q", rec.Arguments, v)
			}
		}
	}
}

// Escaped secrets are found at any level of JSON text inside JSON strings (a tool's
// arguments that carry a JSON document of their own), whatever the escape, and each
// is replaced whole: the payload stays valid JSON at every level, and text around
// it, escapes and all, stays as it was.
func TestEscapedSecretsAreReplacedWhole(t *testing.T) {
	r := redact.New("tok/0123456789/abcdef")
	for in, want := range map[string]string{
		`{"a":"\u0073k-proj-0123456789abcdefABCDEF"}`:                           `{"a":"[REDACTED]"}`,
		`{"a":"tok\/0123456789\/abcdef \u00e9\n"}`:                              `{"a":"[REDACTED] \u00e9\n"}`,
		`{"a":"\u0074\u006fk/0123456789/abcdef\ud83d\ude00"}`:                   `{"a":"[REDACTED]\ud83d\ude00"}`,
		`{"a":"{\"b\":\"{\\\"c\\\":\\\"tok\\\\/0123456789\\\\/abcdef\\\"}\"}"}`: `{"a":"{\"b\":\"{\\\"c\\\":\\\"[REDACTED]\\\"}\"}"}`,
		`{"a":"\u00e9\ud83d\ude00 tok\/0123456789\/abcdef!"}`:                   `{"a":"\u00e9\ud83d\ude00 [REDACTED]!"}`,
		`{"a":"{\"b\":\"\\u00e9\\u0074ok/0123456789/abcdef\\n\"}"}`:             `{"a":"{\"b\":\"\\u00e9[REDACTED]\\n\"}"}`,
		`{"a":"x\\\u0073k-proj-0123456789abcdefABCDEF"}`:                        `{"a":"x\\[REDACTED]"}`,
	} {
		if !json.Valid([]byte(in)) {
			t.Fatalf("%s is not JSON", in)
		}
		if got := string(r.Bytes([]byte(in))); got != want {
			t.Errorf("Bytes(%s) = %s, want %s", in, got, want)
		}
	}
	// No secret behind the escapes: the text itself comes back.
	in := []byte(`{"a":"{\"b\":\"\\u00e9 \\/ \\\\ \u003c\"}"}`)
	if out := r.Bytes(in); &out[0] != &in[0] || string(out) != string(in) {
		t.Errorf("Bytes(%s) = %s, want it unchanged", in, out)
	}
}
