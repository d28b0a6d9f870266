package redact

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// One credential of each shape, as the providers issue them (made-up values).
var keyShapes = []struct{ name, key string }{
	{"OpenAI", "sk-abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKL"},
	{"OpenAI project", "sk-proj-AbCdEf0123456789_AbCdEf-0123456789AbCdEf0123"},
	{"DeepSeek", "sk-0123456789abcdef0123456789abcdef"},
	{"DashScope", "sk-fedcba9876543210fedcba9876543210"},
	{"Zhipu", "3f9a0c2e8b7d41f6a5c3e2d1b0a98765.Zk4PqR7sT2uV9wXy"},
	{"Moonshot", "sk-Mn0PqRsTuVwXyZ0123456789aBcDeFgHiJkLmNoPqRsTuVwX"},
	{"SiliconFlow", "sk-abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuv"},
	{"ModelScope", "ms-12345678-9abc-def0-1234-56789abcdef0"},
	{"Anthropic", "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-AbCdEf"},
	{"JWT", "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"},
	{"Slack bot", "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"},
	{"Slack user", "xoxp-123456789012-123456789012-1234567890123-0123456789abcdef0123456789abcdef"},
	{"Slack app", "xapp-1-A0123456789-1234567890123-abcdef0123456789"},
	{"Slack refresh", "xoxe.xoxp-1-Mi0yLTEyMzQ1Njc4OTAxMi0xMjM0NTY3ODkwMTIz"},
	{"GitHub", "ghp_abcdefghijklmnopqrstuvwxyz0123456789"},
	{"GitHub app", "ghs_abcdefghijklmnopqrstuvwxyz0123456789"},
	{"GitHub fine-grained", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJ"},
	{"Google", "AIzaSyA-0123456789abcdefghijklmnopqrstu"},
	{"AWS", "AKIAIOSFODNN7EXAMPLE"},
}

// Every provider's key shape is redacted wherever it sits in a JSON payload or in
// plain text, with no secret value configured.
func TestRedactsEveryKeyShape(t *testing.T) {
	var r *Redactor // shapes only
	for _, c := range keyShapes {
		for _, tmpl := range []string{
			`{"content":"KEY"}`,
			`{"content":"my key is KEY, thanks"}`,
			`{"content":"line one\nKEY"}`,
			`{"content":"quoted \"KEY\""}`,
			`export VAR=KEY`,
			`https://example.com/?key=KEY&x=1`,
			`https://example.com/?q=%0AKEY`,
		} {
			in := strings.ReplaceAll(tmpl, "KEY", c.key)
			want := strings.ReplaceAll(tmpl, "KEY", Redacted)
			if got := string(r.Bytes([]byte(in))); got != want {
				t.Errorf("%s: Bytes(%s) = %s, want %s", c.name, in, got, want)
			}
		}
	}
}

func TestRedactsBearerTokens(t *testing.T) {
	for in, want := range map[string]string{
		`{"h":"Authorization: Bearer abcdefghijklmnopqrstuvwx"}`:   `{"h":"Authorization: [REDACTED]"}`,
		`{"h":"authorization: BEARER abcdefghijklmnopqrstuvwx=="}`: `{"h":"authorization: [REDACTED]"}`,
		`curl -H "Authorization: bearer a1b2c3d4e5f6g7h8i9j0.x-y"`: `curl -H "Authorization: [REDACTED]"`,
	} {
		if got := New().String(in); got != want {
			t.Errorf("String(%s) = %s, want %s", in, got, want)
		}
	}
}

// Text that only resembles a credential is left as it is.
func TestLeavesOrdinaryTextAlone(t *testing.T) {
	r := New("my-own-secret-value")
	for _, in := range []string{
		`{"content":"What is 12 * (7 + 5)?","tools":["calculator"]}`,
		`{"content":"the bear ran; sk- is short; AKIA1; gh_x; ms-dos; eyJ; xoxo; xapp"}`,
		`{"id":"items-12345678-9abc-def0-1234-56789abcdef0"}`,                           // not ms-<uuid> at a token start
		`{"digest":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}`, // sha256
		`{"file":"d41d8cd98f00b204e9800998ecf8427e.json"}`,
		`{"file":"0123456789abcdef0123456789abcdef.AbCdEfGhIjKlMnOpQ"}`, // 17 after the dot
		`{"file":"x0123456789abcdef0123456789abcdef.AbCdEfGhIjKlMnOp"}`, // 33 before the dot
		`{"content":"Slack's xoxo-gossip channel; the mass-market; axoxb-123456789012"}`,
		`{"session":"cli-01a23129-167f-7350-8c5c-1e130b937423"}`,
		`{"content":"1.5 and 3.25, e.g. or i.e. a.b.c"}`,
		`{"session":"desk-support-ticket-1234567","key":"risk-assessment-2026-report-q4/3"}`, // "sk-" inside a word
	} {
		if got := r.String(in); got != in {
			t.Errorf("String(%s) = %s", in, got)
		}
	}
}

func TestRedactsSecretValues(t *testing.T) {
	r := New("key-abcdef", "", "short", "key-abcdef-longer", "key-abcdef", `pa"ss<word>`)
	got := r.String("key-abcdef and key-abcdef-longer, twice key-abcdef; short stays")
	if got != "[REDACTED] and [REDACTED], twice [REDACTED]; short stays" {
		t.Fatal(got)
	}
	// Inside JSON, a value with characters JSON escapes appears escaped.
	if got := r.String(`{"content":"pw pa\"ss\u003cword\u003e"}`); got != `{"content":"pw [REDACTED]"}` {
		t.Fatal(got)
	}
	if got := New("").String("nothing"); got != "nothing" {
		t.Fatal(got)
	}
}

// A secret added after the Redactor was made is replaced from then on, by the
// Redactor and by every handler that holds it, while it is in use by others: a
// node learns secrets at run time (reloaded API tokens, OAuth tokens). Nothing
// added is forgotten; short and known values are ignored as by New.
func TestAddedSecretsAreReplaced(t *testing.T) {
	r := New("start-secret-value")
	var buf bytes.Buffer
	log := slog.New(NewHandler(slog.NewTextHandler(&buf, nil), r))
	const later = "later-secret-value"
	if got := r.String("x " + later); got != "x "+later {
		t.Fatalf("before Add: %s", got)
	}
	done := make(chan struct{})
	go func() { // Add while Bytes runs (go test -race)
		defer close(done)
		for i := range 50 {
			r.Add(fmt.Sprintf("racing-secret-%04d", i), "tiny")
		}
	}()
	for range 50 {
		r.String("start-secret-value racing-secret-0001")
	}
	<-done
	r.Add(later, `quo"ted-secret`, "start-secret-value")
	if got := r.String("start-secret-value, " + later + ", racing-secret-0049, tiny"); got != "[REDACTED], [REDACTED], [REDACTED], tiny" {
		t.Fatal(got)
	}
	if got := r.String(`{"k":"quo\"ted-secret"}`); got != `{"k":"[REDACTED]"}` {
		t.Fatal(got)
	}
	log.Info("learned " + later)
	if strings.Contains(buf.String(), later) {
		t.Fatalf("the handler does not know the added secret:\n%s", buf.String())
	}
	var none *Redactor
	none.Add(later) // does nothing
	if none.String(later) != later {
		t.Fatal("a nil Redactor replaced a value")
	}
}

// Text with nothing to replace comes back as it is: same bytes, no copy.
func TestBytesWithNothingToReplaceDoesNotCopy(t *testing.T) {
	r := New("my-own-secret-value", "another-secret-value")
	in := []byte(`{"content":"The answer is 144. I used the calculator tool to evaluate 12 * (7 + 5)."}`)
	if out := r.Bytes(in); &out[0] != &in[0] {
		t.Fatal("copied")
	}
	if n := testing.AllocsPerRun(100, func() { r.Bytes(in) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
	orig := []byte(`{"k":"sk-abcdefghijklmnop1234 my-own-secret-value"}`)
	keep := bytes.Clone(orig)
	r.Bytes(orig)
	if !bytes.Equal(orig, keep) {
		t.Fatal("Bytes modified its input")
	}
}

// The pre-filter must never hide a credential the regular expression would match.
func TestPrefilterNeverHidesAShape(t *testing.T) {
	for _, c := range keyShapes {
		for pad := range 4 {
			in := []byte(strings.Repeat(".", pad) + c.key + strings.Repeat("x", pad))
			if shapes.Match(in) && !mayHoldShape(in) {
				t.Errorf("pre-filter hides %s in %q", c.name, in)
			}
		}
	}
	for _, b := range []string{"bearer", "Bearer", "BEARER", "bEaReR"} {
		in := []byte(strings.Repeat("x", 7) + b + " abcdefghijklmnopqrstuv")
		if !mayHoldShape(in) {
			t.Errorf("pre-filter misses %q", in)
		}
	}
}

// The pre-filter never hides a credential, the anchored search finds a secret
// exactly where bytes.Contains does, no secret survives, and the input is never
// modified.
func FuzzRedact(f *testing.F) {
	for _, c := range keyShapes {
		f.Add([]byte(c.key), c.key[3:14])
	}
	f.Add([]byte("Bearer abcdefghijklmnopqrstuvwxyz"), "abcdefghij")
	f.Add([]byte(`{"content":"What is 12 * (7 + 5)?"}`), "QQQQQQQQQQ")
	f.Add([]byte(`xx-house-key-0123-house-key-0123`), "house-key-0123")
	f.Fuzz(func(t *testing.T, b []byte, v string) {
		if shapes.Match(b) && !mayHoldShape(b) {
			t.Fatalf("pre-filter hides a credential in %q", b)
		}
		if v != "" {
			if got, want := (secret{value: []byte(v), anchor: rarest(v)}).in(b), bytes.Contains(b, []byte(v)); got != want {
				t.Fatalf("in(%q, %q) = %v", b, v, got)
			}
		}
		keep := bytes.Clone(b)
		out := New(v).Bytes(b)
		if !bytes.Equal(b, keep) {
			t.Fatal("Bytes modified its input")
		}
		if len(v) >= MinSecretLen && !strings.Contains(Redacted, v) && bytes.Contains(out, []byte(v)) {
			t.Fatalf("Bytes(%q) kept the secret %q: %q", b, v, out)
		}
	})
}

func ExampleRedactor() {
	r := New("house-key-0123")
	fmt.Println(r.String(`use house-key-0123 or ms-12345678-9abc-def0-1234-56789abcdef0, not items-1`))
	// Output: use [REDACTED] or [REDACTED], not items-1
}

// typicalPayload is a model response event, as a session records it.
var typicalPayload = []byte(`{"key":"s-1/4","model":"scripted","message":{"role":"assistant","content":"The answer is 144. I used the calculator tool to evaluate the expression 12 * (7 + 5), which gives 144."},"usage":{"prompt_tokens":60,"completion_tokens":7},"latency_us":103}`)

func BenchmarkBytesTypicalPayload(b *testing.B) {
	r := New("my-own-secret-value")
	b.SetBytes(int64(len(typicalPayload)))
	for b.Loop() {
		r.Bytes(typicalPayload)
	}
}
