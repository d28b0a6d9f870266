package messages

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// checkScan checks scanJSON on b against encoding/json: valid is json.Valid's
// answer, and verbatim says whether json.Marshal copies b, as a json.RawMessage,
// unchanged.
func checkScan(t *testing.T, b []byte) {
	t.Helper()
	valid, verbatim := scanJSON(b)
	if want := json.Valid(b); valid != want {
		t.Fatalf("%q: scanJSON says valid %v, json.Valid %v", b, valid, want)
	}
	if ValidJSON(b) != valid {
		t.Fatalf("%q: ValidJSON and scanJSON disagree", b)
	}
	marshaled, err := json.Marshal(json.RawMessage(b))
	if want := err == nil && bytes.Equal(marshaled, b); verbatim != want {
		t.Fatalf("%q: scanJSON says verbatim %v; json.Marshal gives %q, %v", b, verbatim, marshaled, err)
	}
}

// jsonBytes are the bytes mutations insert: every byte JSON's grammar turns on.
const jsonBytes = "{}[]:,\"\\/ \t\r\nbfnrtu0123456789-+.eEaAlsx<>&\x00\x1f\x7f\xe2\x80\xa8\xa9\xff"

// mutate returns b with a random change: a byte replaced, inserted or deleted, or
// the end cut off.
func mutate(r *rand.Rand, b []byte) []byte {
	b = bytes.Clone(b)
	if len(b) == 0 {
		return []byte{jsonBytes[r.IntN(len(jsonBytes))]}
	}
	i := r.IntN(len(b))
	c := jsonBytes[r.IntN(len(jsonBytes))]
	switch r.IntN(4) {
	case 0:
		b[i] = c
	case 1:
		b = append(b[:i], append([]byte{c}, b[i:]...)...)
	case 2:
		b = append(b[:i], b[i+1:]...)
	default:
		b = b[:i]
	}
	return b
}

// ValidJSON answers as json.Valid does, and scanJSON tells which payloads
// json.Marshal copies unchanged: on hostile payloads, on random ones in every form
// (compact, indented, HTML unescaped) and on thousands of random mutations of both,
// most of them invalid.
func TestValidJSONIsJSONValid(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	var corpus [][]byte
	for _, p := range hostilePayloads {
		corpus = append(corpus, []byte(p))
	}
	for range 500 {
		corpus = append(corpus, randomPayload(t, r))
	}
	for _, b := range corpus {
		checkScan(t, b)
		for range 40 {
			m := mutate(r, b)
			checkScan(t, m)
			checkScan(t, mutate(r, m))
		}
	}
	deep := func(n int, open, close string) []byte {
		return []byte(strings.Repeat(open, n) + "0" + strings.Repeat(close, n))
	}
	for _, n := range []int{63, 64, 65, 127, 128, maxJSONDepth - 1, maxJSONDepth, maxJSONDepth + 1} {
		checkScan(t, deep(n, "[", "]"))
		checkScan(t, deep(n, `{"k":`, "}"))
		checkScan(t, deep(n, `[{"k":`, "}]"))
		checkScan(t, deep(n, `{"k":[`, "]}"))
	}
	// Objects and arrays nested in random order, over several words of the stack of
	// open containers, closed in order and with one closer swapped.
	for range 300 {
		var open, close []string
		for range 1 + r.IntN(300) {
			if r.IntN(2) == 0 {
				open, close = append(open, `{"k":`), append(close, "}")
			} else {
				open, close = append(open, "["), append(close, "]")
			}
		}
		slices.Reverse(close)
		checkScan(t, []byte(strings.Join(open, "")+"1"+strings.Join(close, "")))
		i := r.IntN(len(close))
		close[i] = map[string]string{"}": "]", "]": "}"}[close[i]]
		checkScan(t, []byte(strings.Join(open, "")+"1"+strings.Join(close, "")))
	}
	// Closers that do not match what they close, past 64 levels (a word of the
	// stack of open containers).
	checkScan(t, []byte(strings.Repeat("[", 70)+strings.Repeat("]", 69)+"}"))
	checkScan(t, []byte(strings.Repeat(`{"a":[`, 40)+strings.Repeat("]}", 39)+"}]"))
}

// FuzzValidJSON compares ValidJSON with json.Valid, and scanJSON's verbatim with
// json.Marshal of a json.RawMessage, on whatever the fuzzer makes.
func FuzzValidJSON(f *testing.F) {
	for _, p := range hostilePayloads {
		if len(p) < 1000 {
			f.Add([]byte(p))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkScan(t, b)
	})
}

// BenchmarkValidJSON checks the payload of a model's answer with a tool call, by
// json.Valid and by ValidJSON.
func BenchmarkValidJSON(b *testing.B) {
	resp := &ModelResponded{Key: "bench-12/2", Model: "scripted", Usage: Usage{PromptTokens: 100, CompletionTokens: 20}, LatencyUS: 12,
		Message: ChatMessage{Role: RoleAssistant, Content: strings.Repeat("The answer takes a few words. ", 10),
			ToolCalls: []ToolCall{{ID: "c1", Name: "calculator", Arguments: `{"expression":"12 * (7 + 5)"}`}}}}
	e, err := NewEnvelope(resp)
	if err != nil {
		b.Fatal(err)
	}
	for _, v := range []struct {
		name  string
		valid func([]byte) bool
	}{{"json", json.Valid}, {"scan", ValidJSON}} {
		b.Run(v.name, func(b *testing.B) {
			b.SetBytes(int64(len(e.Payload)))
			for b.Loop() {
				if !v.valid(e.Payload) {
					b.Fatal("invalid")
				}
			}
		})
	}
}
