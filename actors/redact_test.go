package actors

import (
	"strings"
	"testing"
)

// The pre-filter must never hide a token the regular expression would redact.
func TestRedactorFindsEveryTokenShape(t *testing.T) {
	r := NewSecretRedactor("my-own-secret-value")
	cases := map[string]string{
		`{"content":"use sk-abcdefghijklmnop1234 please"}`:           `{"content":"use [REDACTED] please"}`,
		`{"h":"Authorization: Bearer abcdefghijklmnopqrstuvwx"}`:     `{"h":"Authorization: [REDACTED]"}`,
		`{"h":"authorization: BEARER abcdefghijklmnopqrstuvwx=="}`:   `{"h":"authorization: [REDACTED]"}`,
		`{"aws":"AKIAABCDEFGHIJKLMNOP"}`:                             `{"aws":"[REDACTED]"}`,
		`{"gh":"ghp_abcdefghijklmnopqrstuvwxyz0123456789"}`:          `{"gh":"[REDACTED]"}`,
		`{"gh":"ghs_abcdefghijklmnopqrstuvwxyz0123456789"}`:          `{"gh":"[REDACTED]"}`,
		`{"s":"my-own-secret-value"}`:                                `{"s":"[REDACTED]"}`,
		`{"content":"the bear ran; sk- is short; AKIA1; gh_x"}`:      `{"content":"the bear ran; sk- is short; AKIA1; gh_x"}`,
		`{"content":"What is 12 * (7 + 5)?","tools":["calculator"]}`: `{"content":"What is 12 * (7 + 5)?","tools":["calculator"]}`,
	}
	for in, want := range cases {
		if got := string(r.Redact([]byte(in))); got != want {
			t.Errorf("Redact(%s) = %s, want %s", in, got, want)
		}
		// Whatever the regular expression matches, the pre-filter lets through.
		if tokenShapes.MatchString(in) && !mayHoldToken([]byte(in)) {
			t.Errorf("pre-filter hides a token in %s", in)
		}
	}
	// Every prefix position and case of "bearer".
	for _, b := range []string{"bearer", "Bearer", "BEARER", "bEaReR"} {
		in := []byte(strings.Repeat("x", 7) + b + " abcdefghijklmnopqrstuv")
		if !mayHoldToken(in) {
			t.Errorf("pre-filter misses %q", in)
		}
	}
}

func BenchmarkRedactTypicalPayload(b *testing.B) {
	r := NewSecretRedactor("my-own-secret-value")
	payload := []byte(`{"key":"s-1/4","model":"scripted","message":{"role":"assistant","content":"The answer is 144. I used the calculator tool to evaluate the expression 12 * (7 + 5), which gives 144."},"usage":{"prompt_tokens":60,"completion_tokens":7},"latency_us":103}`)
	b.SetBytes(int64(len(payload)))
	for b.Loop() {
		r.Redact(payload)
	}
}
