//go:build review

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
