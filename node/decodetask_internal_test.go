package node

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
)

// DecodeTask reads the top-level keys with a scanner of its own: escaped and
// spaced-out keys, nested values and every refusal must come out as encoding/json
// would have them.
func TestDecodeTaskKeys(t *testing.T) {
	for _, c := range []struct {
		body string
		want Task
		err  string // a substring of the error; "" for none
	}{
		{body: `{"input":"hi"}`, want: Task{Input: "hi"}},
		{body: " \n{ \"input\" :\t\"hi\" , \"session_id\" : \"s-1\" }\r\n", want: Task{Input: "hi", SessionID: "s-1"}},
		{body: `{"\u0069nput":"hi","max_steps":3}`, want: Task{Input: "hi", MaxSteps: 3}},
		{body: `{"input":"a \"quoted\" {brace}, [bracket]","deadline_ms":1500}`, want: Task{Input: `a "quoted" {brace}, [bracket]`, DeadlineMS: 1500}},
		{body: `{"input":"hi","\u0069nput":"again"}`, err: `duplicate key "input"`},
		{body: `{"input":"hi","agent":{"nested":[1,{"x":"}"}]}}`, err: "agent must be a string, not a JSON object"},
		// A value of the wrong type is no malformed JSON: the error names the
		// field and what it takes, not Go's types.
		{body: `{"input":5}`, err: "bad task: input must be a string, not a JSON number"},
		{body: `{"input":"hi","session_id":true}`, err: "session_id must be a string, not a JSON bool"},
		{body: `{"input":"hi","max_tokens":"10"}`, err: "max_tokens must be an integer, not a JSON string"},
		{body: `{"input":"hi","max_steps":10.5}`, err: "max_steps must be an integer within its bounds, got \"10.5\""},
		{body: `{"input":"hi","max_cost_usd":[1]}`, err: "max_cost_usd must be a number, not a JSON array"},
		{body: `{"input":"hi","max_tokens":1` + strings.Repeat("0", 5000) + `}`, err: "(5001 bytes)"},
		{body: `{"input":"hi","Deadline_MS":5}`, err: `case-sensitive: "deadline_ms"`},
		{body: `{"input":"hi","inpüt":"x"}`, err: `unknown field "inpüt"`},
		{body: `{"input":"hi","extra":null}`, err: `unknown field "extra"`},
		{body: `{"input":"hi","deadline_ms":null}`, err: "deadline_ms must be between 1 and"},
		{body: `{"input":"hi","deadline_ms":0}`, err: "got 0"},
		{body: `{"input":"hi"} {}`, err: "malformed JSON"},
		{body: `{"input":"hi",}`, err: "malformed JSON"},
		{body: `"input"`, err: "must be a JSON object"},
		{body: `{}`, err: "input is required"},
		{body: `{"input":"hi","session_id":"-bad"}`, err: "session_id must be"},
	} {
		got, err := DecodeTask([]byte(c.body))
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.body, err)
		case c.err == "" && got != c.want:
			t.Errorf("%s: %+v, want %+v", c.body, got, c.want)
		case c.err != "" && (err == nil || !errors.Is(err, ErrBadTask) || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: error %v, want one naming %q", c.body, err, c.err)
		}
	}
}

// ValidSessionID checks by hand what sessionIDPattern says.
func TestValidSessionIDMatchesItsPattern(t *testing.T) {
	for _, id := range []string{"", "a", "-a", "a-", "a.b_c:d-e", "A9", "9", ".", "_a", "a b", "é", "aé", "a\n", "a/b", "a\x00",
		strings.Repeat("a", 128), strings.Repeat("a", 129), strings.Repeat("\x00", 128)} {
		if got, want := ValidSessionID(id), sessionIDPattern.MatchString(id); got != want {
			t.Errorf("ValidSessionID(%q) = %v, the pattern says %v", id, got, want)
		}
	}
}

func BenchmarkDecodeBusTask(b *testing.B) {
	in := newIngress(nil, actors.SystemClock{}, actors.UUIDv7{})
	sid := "bench20261202T124139749514-kafka-1-r1-000123"
	a := Arrival{Source: SourceBus, Payload: []byte(`{"input":"What is 12 * (7 + 5)?","session_id":"` + sid + `"}`), MessageID: "m-1", Key: sid}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := in.Decode(a); err != nil {
			b.Fatal(err)
		}
	}
}

// isEnvelope reads only keys; it must say what decoding into the probe struct it
// replaced says.
func TestIsEnvelopeAsDecodingSays(t *testing.T) {
	probe := func(b []byte) bool {
		var p struct {
			Type    *string          `json:"type"`
			Payload *json.RawMessage `json:"payload"`
		}
		return json.Unmarshal(b, &p) == nil && p.Type != nil && p.Payload != nil
	}
	for _, body := range []string{
		`{"type":"task.submitted","payload":{"input":"x"}}`,
		`{"id":"m","type":"task.submitted","v":1,"payload":{}}`,
		`{"TYPE":"t","Payload":1}`,
		`{"\u0074ype":"t","payload":[]}`,
		`{"type":"t"}`,
		`{"payload":{}}`,
		`{"type":null,"payload":{}}`,
		`{"type":"t","payload":null}`,
		`{"type":5,"payload":{}}`,
		`{"type":"t","payload":{},"type":null}`,
		`{"type":null,"payload":{},"type":"t"}`,
		`{"type":{"a":"b"},"payload":{}}`,
		`{"input":"hi","session_id":"s-1"}`,
		`{"input":"type","payload_x":"payload"}`,
		`null`,
		`[{"type":"t","payload":{}}]`,
		`"type"`,
		`{}`,
	} {
		if got, want := isEnvelope([]byte(body)), probe([]byte(body)); got != want {
			t.Errorf("isEnvelope(%s) = %v, decoding says %v", body, got, want)
		}
	}
}
