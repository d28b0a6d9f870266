package actors

import (
	"testing"

	"github.com/troupe-run/troupe/redact"
)

// typicalPayload is a model response event, as a session records it: a session
// redacts every payload it records (Deps.Redactor).
var typicalPayload = []byte(`{"key":"s-1/4","model":"scripted","message":{"role":"assistant","content":"The answer is 144. I used the calculator tool to evaluate the expression 12 * (7 + 5), which gives 144."},"usage":{"prompt_tokens":60,"completion_tokens":7},"latency_us":103}`)

func BenchmarkRedactTypicalPayload(b *testing.B) {
	r := redact.New("my-own-secret-value")
	b.SetBytes(int64(len(typicalPayload)))
	for b.Loop() {
		r.Bytes(typicalPayload)
	}
}

// With every key variable of a well-stocked environment set (the nine the node
// collects: seven providers, LLM_API_KEY and one named by llm.api_key_env).
func BenchmarkRedactTypicalPayloadNineKeys(b *testing.B) {
	r := redact.New("sk-proj-AbCdEf0123456789_AbCdEf-0123456789AbCdEf0123", "sk-0123456789abcdef0123456789abcdef",
		"sk-fedcba9876543210fedcba9876543210", "3f9a0c2e8b7d41f6a5c3e2d1b0a98765.Zk4PqR7sT2uV9wXy",
		"sk-Mn0PqRsTuVwXyZ0123456789aBcDeFgHiJkLmNoPqRsTuVwX", "sk-abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuv",
		"ms-12345678-9abc-def0-1234-56789abcdef0", "generic-plain-value-77aa", "house-plain-value-91bd")
	b.SetBytes(int64(len(typicalPayload)))
	for b.Loop() {
		r.Bytes(typicalPayload)
	}
}

// escapedPayload is a tool call's request, as a session records it: its arguments
// are JSON text in a JSON string, whose own escapes (\\n, \\u003c) make the
// redactor decode it to look for escaped secrets.
var escapedPayload = []byte(`{"key":"s-1/5","tool":"http","arguments":"{\"url\":\"https://example.com/api?q=1\u0026r=2\",\"body\":\"{\\\"text\\\":\\\"line one\\\\nline two \\\\u003cb\\\\u003e\\\"}\",\"method\":\"POST\"}","call_id":"call_0123456789"}`)

func BenchmarkRedactEscapedToolRequest(b *testing.B) {
	r := redact.New("my-own-secret-value")
	b.SetBytes(int64(len(escapedPayload)))
	for b.Loop() {
		r.Bytes(escapedPayload)
	}
}
