package messages

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// hostilePayloads are payloads json.Marshal rewrites or refuses: whitespace between
// tokens, HTML characters and U+2028/U+2029 left unescaped, escapes of every kind,
// numbers JSON allows and Go could not hold, invalid UTF-8 in strings, nesting at
// and beyond encoding/json's limit, and bytes that are not one JSON value.
var hostilePayloads = []string{
	`{}`, `[]`, `null`, `true`, `false`, `0`, `-0`, `"x"`, `""`,
	" {\"a\" : 1 ,\n\t\"b\":[ 1 , 2 ]\r\n} ", "\t\n\r 17 \t\n\r",
	`{"html":"<script>alert(1)</script> & co"}`, `"<>&"`, `["a<b", "a&&b", ">>"]`,
	"{\"sep\":\"line\u2028sep\u2029\"}", "\"\u2028\"", "\"only \u2029\"", "\"\u2029\u2028<\"",
	`{"esc":"\u003c\u003e\u0026 \u2028 \" \\ \/ \b\f\n\r\t \ud83c\udf89 \u0000"}`,
	`1e999999`, `-1E-999999`, `123456789012345678901234567890.123456789e+12`, `0.0`, `-0.5e1`,
	"\"bad \xff\xfe utf8 \xc3\"", "\"\xe2\x80\"", "\"\xe2\x80\xa8\xe2\x80\xa9\xe2\x80\xaa\"",
	`{"a":{"b":{"c":[[[[{"d":null}]]]]}}}`, `{"k":1,"k":2}`,
	strings.Repeat("[", 9999) + strings.Repeat("]", 9999),
	strings.Repeat(`{"a":`, 5000) + "1" + strings.Repeat("}", 5000),
	`{"big":"` + strings.Repeat("héllo <wörld> & 你好 ", 20000) + `"}`,
	// Not one JSON value.
	``, ` `, "\n\t", `{`, `}`, `{"a":1`, `{"a":1}x`, `{"a":1} {"b":2}`, `{"a":1},`, `1 2`, `01`, `+1`, `.5`, `1.`, `1e`, `-`,
	`'a'`, `nul`, `nulll`, `True`, `NaN`, `Infinity`, `[1,]`, `{"a":1,}`, `{a:1}`, `{"a" 1}`, `{"a":}`,
	`"unterminated`, "\"ctl \x01 char\"", "\"tab\tinside\"", `"\u12"`, `"\x"`, `"\'"`, `<b>`, `&`,
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	"\xef\xbb\xbf{}", "{}\x00",
}

// randomPayload returns a payload of a type that encodes itself, with random fields:
// as NewEnvelope writes it, or indented, or with HTML characters unescaped, or both,
// with whitespace around it: every form a payload can reach Marshal in.
func randomPayload(t testing.TB, r *rand.Rand) json.RawMessage {
	types := []Payload{&TaskSubmitted{}, &ModelRequested{}, &ModelResponded{}, &ToolCallRequested{}, &ToolCallCompleted{}, &TaskCompleted{}, &TaskFailed{}}
	v := reflect.New(reflect.TypeOf(types[r.IntN(len(types))]).Elem())
	fill(r, v.Elem(), 0)
	e, err := NewEnvelope(v.Interface().(Payload))
	if err != nil {
		return json.RawMessage(`{"unencodable":true}`) // a NaN or an infinity
	}
	p := e.Payload
	if r.IntN(2) == 0 {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v.Interface()); err != nil {
			t.Fatal(err)
		}
		p = buf.Bytes()
	}
	if r.IntN(2) == 0 {
		var buf bytes.Buffer
		if err := json.Indent(&buf, p, strings.Repeat(" ", r.IntN(3)), []string{"\t", "  ", " \r\n "}[r.IntN(3)]); err != nil {
			t.Fatal(err)
		}
		p = buf.Bytes()
	}
	if r.IntN(3) == 0 {
		p = append(append([]byte(" \n\t"), p...), "\r\n "...)
	}
	return p
}

// randomEnvelope returns an envelope with random fields (strings with every kind of
// escape, empty ones included) around payload.
func randomEnvelope(r *rand.Rand, payload json.RawMessage) Envelope {
	str := func() string { return trickyStrings[r.IntN(len(trickyStrings))] }
	e := Envelope{ID: str(), SessionID: str(), Type: Type(str()), CausationID: str(), CorrelationID: str(), Actor: str(), Payload: payload}
	switch r.IntN(3) {
	case 0:
		e.Seq = r.Uint64()
	case 1:
		e.Seq = uint64(r.IntN(100))
	}
	e.Version = []int{0, 1, 2, -1, math.MaxInt, math.MinInt}[r.IntN(6)]
	e.TS = []int64{0, r.Int64(), -r.Int64(), math.MinInt64, math.MaxInt64, 1767225600123456}[r.IntN(6)]
	return e
}

// checkMarshal checks that Marshal and AppendEnvelope encode e exactly as json.Marshal
// does, and refuse (with ErrCorrupt, dst unchanged) what Marshal must refuse: a
// missing ID, session or type, or a payload that is not one JSON value.
func checkMarshal(t *testing.T, name string, e Envelope) {
	t.Helper()
	want, wantErr := json.Marshal(e)
	refuse := e.ID == "" || e.SessionID == "" || e.Type == "" || len(e.Payload) == 0 || wantErr != nil
	if wantErr != nil && len(e.Payload) > 0 && json.Valid(e.Payload) {
		t.Fatalf("%s: json.Marshal refused a valid payload: %v", name, wantErr)
	}
	got, err := Marshal(e)
	switch {
	case refuse && !errors.Is(err, ErrCorrupt):
		t.Fatalf("%s: Marshal gave %q, %v; want ErrCorrupt", name, got, err)
	case refuse:
	case err != nil:
		t.Fatalf("%s: Marshal: %v", name, err)
	case !bytes.Equal(got, want):
		t.Fatalf("%s:\n got  %q\n want %q", name, got, want)
	}
	prefix := []byte("prefix")
	app, err := AppendEnvelope(prefix[:len(prefix):len(prefix)], e)
	switch {
	case refuse && (!errors.Is(err, ErrCorrupt) || string(app) != "prefix"):
		t.Fatalf("%s: AppendEnvelope gave %q, %v; want \"prefix\", ErrCorrupt", name, app, err)
	case !refuse && (err != nil || !bytes.Equal(app, append(prefix, want...))):
		t.Fatalf("%s: AppendEnvelope gave %q, %v", name, app, err)
	}
	if refuse {
		return
	}
	if _, err := Unmarshal(got); err != nil {
		t.Fatalf("%s: Unmarshal of Marshal's bytes: %v", name, err)
	}
}

// Marshal encodes envelopes exactly as json.Marshal does: random fields with every
// string escape, payloads as NewEnvelope writes them and rewritten (indented, HTML
// characters unescaped, whitespace around), and hostile payloads, which it compacts
// and escapes as json.Marshal does, or refuses with ErrCorrupt when they are not
// one JSON value.
func TestMarshalIsJSONMarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 5000 {
		checkMarshal(t, "random #"+strconv.Itoa(i), randomEnvelope(r, randomPayload(t, r)))
	}
	for i, p := range hostilePayloads {
		e := Envelope{ID: "e-1", SessionID: "s-1", Seq: 7, Type: TypeTaskCompleted, Version: 1, TS: 1767225600123456, Actor: "session", Payload: json.RawMessage(p)}
		name := "hostile payload #" + strconv.Itoa(i)
		if len(p) < 80 {
			name = "payload " + p
		}
		checkMarshal(t, name, e)
		checkMarshal(t, name+" in a random envelope", randomEnvelope(r, json.RawMessage(p)))
	}
	checkMarshal(t, "nil payload", Envelope{ID: "e-1", SessionID: "s-1", Type: TypeTaskCompleted})
	checkMarshal(t, "no causation or correlation", Envelope{ID: "e-1", SessionID: "s-1", Type: TypeTaskCompleted, Payload: json.RawMessage(`{}`)})
}

// Marshal's error for a payload that is not JSON names the session and seq.
func TestMarshalRefusesBadPayload(t *testing.T) {
	_, err := Marshal(Envelope{ID: "e-1", SessionID: "s-9", Seq: 4, Type: TypeTaskCompleted, Payload: json.RawMessage(`{"a":1} x`)})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "session s-9 seq 4: payload is not valid JSON") {
		t.Fatalf("got %v", err)
	}
}

// Unmarshal still refuses an envelope without a payload or with one that is not
// JSON, and keeps a payload of null.
func TestUnmarshalPayload(t *testing.T) {
	head := `{"id":"a","session_id":"s","seq":1,"type":"task.completed","v":1,"ts":1,"actor":"x"`
	for raw, ok := range map[string]bool{
		head + `}`:                       false,
		head + `,"payload":""}`:          true, // a JSON string is a JSON value
		head + `,"payload":null}`:        true,
		head + `,"payload":{"a":1} }`:    true,
		head + `,"payload":{"a":1,}}`:    false,
		head + `,"payload":{"a":01}}`:    false,
		head + `,"payload":"\x"}`:        false,
		head + `,"payload":[1,2}`:        false,
		head + `,"payload":{"a":"b"} x}`: false,
	} {
		e, err := Unmarshal([]byte(raw))
		switch {
		case ok && err != nil:
			t.Errorf("%s: %v", raw, err)
		case ok && !json.Valid(e.Payload):
			t.Errorf("%s: payload %q", raw, e.Payload)
		case !ok && !errors.Is(err, ErrCorrupt):
			t.Errorf("%s: got %v, want ErrCorrupt", raw, err)
		}
	}
}

// BenchmarkMarshal encodes the envelopes of a step (a model's request with its
// context report, its answer, a tool call and its result) by json.Marshal after
// json.Valid, as Marshal did, and by AppendEnvelope, as it does now.
func BenchmarkMarshal(b *testing.B) {
	req := &ModelRequested{Key: "bench-12/2", Model: "scripted", Step: 1, Messages: 2, PromptHash: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		Context: &ContextReport{Window: 128000, Reserved: 4096, System: 600, Budget: 123304, Used: 50,
			Kept: []ContextItem{{ID: "system", Kind: "system", Tokens: 600, Score: 1}, {ID: "task", Kind: "task", Tokens: 20, Score: 1}, {ID: "turn/1", Kind: "turn", Tokens: 30, Score: 0.875}}}}
	resp := &ModelResponded{Key: "bench-12/2", Model: "scripted", Usage: Usage{PromptTokens: 100, CompletionTokens: 20}, LatencyUS: 12,
		Message: ChatMessage{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "c1", Name: "calculator", Arguments: `{"expression":"12 * (7 + 5)"}`}}}}
	call := &ToolCallRequested{Key: "bench-12/4", CallID: "c1", Tool: "calculator", Arguments: `{"expression":"12 * (7 + 5)"}`, Step: 1}
	done := &ToolCallCompleted{Key: "bench-12/4", CallID: "c1", Tool: "calculator", Result: "144", LatencyUS: 35}
	var envs []Envelope
	for i, p := range []Payload{req, resp, call, done} {
		e, err := NewEnvelope(p)
		if err != nil {
			b.Fatal(err)
		}
		e.ID, e.SessionID, e.Seq, e.CausationID, e.CorrelationID, e.TS, e.Actor = "bench-12/"+string(rune('1'+i)), "bench-12", uint64(i+2), "bench-12/1", "bench-12/1", 1767225600123456, "session"
		envs = append(envs, e)
	}
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, e := range envs {
				if err := e.validateFields(); err != nil || !json.Valid(e.Payload) {
					b.Fatal("invalid")
				}
				if _, err := json.Marshal(e); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, e := range envs {
				if _, err := Marshal(e); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

// SizeHint leaves room for the whole encoding of an envelope whose strings need no
// escapes and whose payload is compact, with every field at its longest.
func TestSizeHintCoversPlainEnvelopes(t *testing.T) {
	e := Envelope{ID: "task-1/7", SessionID: "s-1", Seq: math.MaxUint64, Type: TypeTaskCompleted, Version: math.MinInt,
		CausationID: "task-1/6", CorrelationID: "task-1", TS: math.MinInt64, Actor: "session", Payload: json.RawMessage(`{"output":"42","steps":2}`)}
	b, err := Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	if e.SizeHint() < len(b) {
		t.Fatalf("SizeHint %d, encoding %d bytes: %s", e.SizeHint(), len(b), b)
	}
	if e.SizeHint() > len(b)+8 {
		t.Fatalf("SizeHint %d for an encoding of %d bytes, most of them at their longest", e.SizeHint(), len(b))
	}
}
