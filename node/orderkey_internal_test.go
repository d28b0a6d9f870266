package node

import (
	"encoding/json"
	"testing"
)

// payloadSessionID reads only keys; it must say what decoding into the probe struct
// it replaced says.
func TestPayloadSessionIDAsDecodingSays(t *testing.T) {
	probe := func(b []byte) string {
		var p struct {
			SessionID string `json:"session_id"`
		}
		if json.Unmarshal(b, &p) != nil {
			return ""
		}
		return p.SessionID
	}
	for _, body := range []string{
		`{"input":"x","session_id":"s-1"}`,
		`{"session_id":"s-1","input":"x"}`,
		` { "session_id" : "s-1" } `,
		`{"SESSION_ID":"s-2"}`,
		`{"Session_Id":"a","session_id":"b"}`,
		`{"session_id":"a","Session_Id":"b"}`,
		`{"\u0073ession_id":"s-3"}`,
		"{\"\u017fession_id\":\"long-s\"}", // U+017F folds to s
		`{"session_id":"a\u0062c"}`,
		"{\"session_id\":\"\xff\"}",
		`{"session_id":"é"}`,
		`{"session_id":null}`,
		`{"session_id":"a","session_id":null}`,
		`{"session_id":5}`,
		`{"session_id":5,"session_id":"a"}`,
		`{"session_id":"a","session_id":{}}`,
		`{"session_id":["a"]}`,
		`{"session_id":true}`,
		`{"session_id":""}`,
		`{"sessionid":"x"}`,
		`{"session_id ":"x"}`,
		`{"input":{"session_id":"nested"}}`,
		`{}`,
		`null`,
		`"s"`,
		`["session_id","s"]`,
		`5`,
		`{"session_id":"a"} x`,
		`{"session_id":"a"`,
		`{"session_id":"a",}`,
		``,
		`{"session_id":"a\"b"}`,
		`{"session_id":"a\\b","input":"\ud800"}`,
	} {
		if got, want := payloadSessionID([]byte(body)), probe([]byte(body)); got != want {
			t.Errorf("payloadSessionID(%q) = %q, decoding gives %q", body, got, want)
		}
	}
}

func BenchmarkOrderKey(b *testing.B) {
	payload := []byte(`{"input":"What is 12 * (7 + 5)?","session_id":"bench20261202T124139749514-kafka-1-r1-000123"}`)
	b.ReportAllocs()
	for b.Loop() {
		if payloadSessionID(payload) == "" {
			b.Fatal("no session")
		}
	}
}
