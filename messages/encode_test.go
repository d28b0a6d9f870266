package messages

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
)

// trickyStrings are strings whose encoding has every case of encoding/json's string
// escaping: HTML characters, control characters with and without a short escape,
// quotes and backslashes, U+2028 and U+2029, invalid UTF-8, multi-byte runes, DEL.
var trickyStrings = []string{
	"", "a", "plain text", `say "hi" \ bye`, "<script>&amp;</script>", "\b\f\n\r\t\x00\x01\x1f\x7f",
	"line\u2028sep\u2029", "bad \xff\xfe utf8 \xc3", "héllo wörld 你好 🎉", `{"expression":"12 * (7 + 5)"}`,
	"\xe2\x80", "tab\tend\n",
}

// trickyFloats are floats at and around encoding/json's switches between %f and %e.
var trickyFloats = []float64{0, math.Copysign(0, -1), 1, -1, 0.875, 0.001, 1e-6, 9.99e-7, 1e-7, 1.5e-9, 1e20, 1e21, 1.234e22,
	-2.5e-8, 123456789.125, math.MaxFloat64, math.SmallestNonzeroFloat64, 0.1 + 0.2}

// fill sets v (settable) to a random value: strings, numbers, bools, slices (nil,
// empty or not), pointers (nil or not) and structs, field by field.
func fill(r *rand.Rand, v reflect.Value, depth int) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(trickyStrings[r.IntN(len(trickyStrings))])
	case reflect.Int, reflect.Int64, reflect.Int32:
		switch r.IntN(4) {
		case 0:
			v.SetInt(0)
		case 1:
			v.SetInt(-r.Int64N(1 << 40))
		default:
			v.SetInt(r.Int64N(1 << 50))
		}
	case reflect.Float64:
		v.SetFloat(trickyFloats[r.IntN(len(trickyFloats))] * []float64{1, -1}[r.IntN(2)])
	case reflect.Bool:
		v.SetBool(r.IntN(2) == 0)
	case reflect.Slice:
		switch n := r.IntN(5); {
		case n == 0 || depth > 3:
			v.SetZero()
		case n == 1:
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
		default:
			s := reflect.MakeSlice(v.Type(), n-1, n-1)
			for i := range n - 1 {
				fill(r, s.Index(i), depth+1)
			}
			v.Set(s)
		}
	case reflect.Pointer:
		if r.IntN(4) == 0 || depth > 3 {
			v.SetZero()
			return
		}
		p := reflect.New(v.Type().Elem())
		fill(r, p.Elem(), depth+1)
		v.Set(p)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(r, v.Field(i), depth+1)
			}
		}
	default:
		panic("fill: unexpected kind " + v.Kind().String() + " in " + v.Type().String())
	}
}

// The payloads that encode themselves encode exactly as json.Marshal does, for
// random values of every field (a field added to one of these types and not to its
// appendJSON shows here), and fall back to json.Marshal's error for a float JSON
// cannot hold.
func TestAppendedJSONIsJSONMarshal(t *testing.T) {
	payloads := []Payload{&TaskSubmitted{}, &ModelRequested{}, &ModelResponded{}, &ToolCallRequested{}, &ToolCallCompleted{}, &TaskCompleted{}, &TaskFailed{}}
	r := rand.New(rand.NewPCG(1, 2))
	for _, p := range payloads {
		if _, ok := p.(jsonAppender); !ok {
			t.Fatalf("%T does not encode itself", p)
		}
		typ := reflect.TypeOf(p).Elem()
		for i := range 3000 {
			v := reflect.New(typ)
			fill(r, v.Elem(), 0)
			p := v.Interface().(Payload)
			want, wantErr := json.Marshal(p)
			e, err := NewEnvelope(p)
			if (err != nil) != (wantErr != nil) {
				t.Fatalf("%T #%d: NewEnvelope error %v, json.Marshal's %v", p, i, err, wantErr)
			}
			if err == nil && !bytes.Equal(e.Payload, want) {
				t.Fatalf("%T #%d:\n got  %s\n want %s", p, i, e.Payload, want)
			}
		}
		// Every field set, and the zero value.
		if got, _ := appendedJSON(reflect.New(typ).Interface().(jsonAppender)); !bytes.Equal(got, mustMarshal(t, reflect.New(typ).Interface())) {
			t.Fatalf("%T zero value: %s", p, got)
		}
	}
	nan := &ModelResponded{Usage: Usage{CostUSD: math.NaN()}}
	if _, err := NewEnvelope(nan); err == nil {
		t.Fatal("a NaN cost encoded")
	}
	inf := &ModelRequested{Context: &ContextReport{Kept: []ContextItem{{Score: math.Inf(1)}}}}
	if _, err := NewEnvelope(inf); err == nil {
		t.Fatal("an infinite score encoded")
	}
	if got, _ := appendedJSON((*ModelRequested)(nil)); string(got) != "null" {
		t.Fatalf("nil payload: %s", got)
	}
}

// AppendChatJSON encodes a conversation exactly as json.Marshal does: random ones,
// an empty one and none.
func TestAppendChatJSONIsJSONMarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 3000 {
		var msgs []ChatMessage
		fill(r, reflect.ValueOf(&msgs).Elem(), 0)
		if got, want := AppendChatJSON(nil, msgs), mustMarshal(t, msgs); !bytes.Equal(got, want) {
			t.Fatalf("#%d:\n got  %s\n want %s", i, got, want)
		}
	}
	for _, msgs := range [][]ChatMessage{nil, {}} {
		if got, want := AppendChatJSON([]byte("x"), msgs), append([]byte("x"), mustMarshal(t, msgs)...); !bytes.Equal(got, want) {
			t.Fatalf("%#v: got %s, want %s", msgs, got, want)
		}
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// BenchmarkNewEnvelope encodes the payloads of a step: a model's request with its
// context report, its answer, a tool call.
func BenchmarkNewEnvelope(b *testing.B) {
	req := &ModelRequested{Key: "bench-12/2", Model: "scripted", Step: 1, Messages: 2, PromptHash: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		Context: &ContextReport{Window: 128000, Reserved: 4096, System: 600, Budget: 123304, Used: 50,
			Kept: []ContextItem{{ID: "system", Kind: "system", Tokens: 600, Score: 1}, {ID: "task", Kind: "task", Tokens: 20, Score: 1}, {ID: "turn/1", Kind: "turn", Tokens: 30, Score: 0.875}}}}
	resp := &ModelResponded{Key: "bench-12/2", Model: "scripted", Usage: Usage{PromptTokens: 100, CompletionTokens: 20}, LatencyUS: 12,
		Message: ChatMessage{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "c1", Name: "calculator", Arguments: `{"expression":"12 * (7 + 5)"}`}}}}
	call := &ToolCallRequested{Key: "bench-12/4", CallID: "c1", Tool: "calculator", Arguments: `{"expression":"12 * (7 + 5)"}`, Step: 1}
	b.ReportAllocs()
	for b.Loop() {
		for _, p := range []Payload{req, resp, call} {
			if _, err := NewEnvelope(p); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// plainEnd agrees with jsonSafe on every byte at every place of a plain chunk,
// and on random chunks: the eight-byte skip of appendJSONString never passes over
// a byte it must escape.
func TestPlainEndIsJSONSafe(t *testing.T) {
	want := func(s string) bool {
		for i := range len(s) {
			if s[i] >= 0x80 || !jsonSafe[s[i]] {
				return false
			}
		}
		return true
	}
	base := []byte("abcdefgh")
	for pos := range 8 {
		for b := range 256 {
			c := append([]byte(nil), base...)
			c[pos] = byte(b)
			if got := plainEnd(string(c), 0) == 8; got != want(string(c)) {
				t.Fatalf("plainEnd(%q) skips it: %v", c, got)
			}
		}
	}
	r := rand.New(rand.NewPCG(5, 6))
	alphabet := []byte("aZ09 ~\x7f\x00\x1f\x20\"\\<>&\x80\xff\xc3\xe2\t\n")
	for range 200000 {
		c := make([]byte, 8)
		for i := range c {
			if r.IntN(3) == 0 {
				c[i] = alphabet[r.IntN(len(alphabet))]
			} else {
				c[i] = byte(r.IntN(256))
			}
		}
		if got := plainEnd(string(c), 0) == 8; got != want(string(c)) {
			t.Fatalf("plainEnd(%q) skips it: %v", c, got)
		}
	}
}

// appendJSONString encodes as json.Marshal does strings of every length with the
// bytes to escape at every place, around and across the eight-byte chunks it skips.
func TestAppendJSONStringIsJSONMarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	specials := []string{"\"", "\\", "<", ">", "&", "\x00", "\x1f", "\n", "\x7f", "é", "你", "🎉", "\u2028", "\u2029", "\xff", "\xe2\x80", "\xc3"}
	for n := range 40 {
		for range 300 {
			b := make([]byte, 0, n+8)
			for len(b) < n {
				if r.IntN(6) == 0 {
					b = append(b, specials[r.IntN(len(specials))]...)
				} else {
					b = append(b, byte('a'+r.IntN(26)))
				}
			}
			s := string(b)
			want, err := json.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			if got := appendJSONString(nil, s); !bytes.Equal(got, want) {
				t.Fatalf("%q:\n got  %s\n want %s", s, got, want)
			}
		}
	}
}
