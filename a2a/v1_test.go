package a2a

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// A 1.0 message's parts become 0.3 parts and back unchanged: text, data (an object,
// and a value that is not one, wrapped), raw bytes and a URL with their media type
// and file name.
func TestV1PartsRoundTrip(t *testing.T) {
	const in = `{"messageId":"m1","contextId":"c1","role":"ROLE_USER","parts":[
		{"text":"hi","metadata":{"k":"v"}},
		{"data":{"approve":true}},
		{"data":[1,2]},
		{"raw":"aGVsbG8=","mediaType":"text/plain","filename":"a.txt"},
		{"url":"https://example.com/b.pdf","mediaType":"application/pdf"}]}`
	var m map[string]any
	if err := decodeJSON([]byte(in), &m); err != nil {
		t.Fatal(err)
	}
	legacy, err := v1ToMessage(m)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(legacy)
	for _, want := range []string{`"role":"user"`, `"kind":"message"`, `{"kind":"text","metadata":{"k":"v"},"text":"hi"}`,
		`{"data":{"approve":true},"kind":"data"}`, `{"data":{"value":[1,2]},"kind":"data","metadata":{"data_part_compat":true}}`,
		`{"file":{"bytes":"aGVsbG8=","mimeType":"text/plain","name":"a.txt"},"kind":"file"}`,
		`{"file":{"mimeType":"application/pdf","uri":"https://example.com/b.pdf"},"kind":"file"}`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("0.3 message %s\nlacks %s", b, want)
		}
	}
	back := v1Message(legacy)
	back["role"], m["role"] = "", ""
	if !reflect.DeepEqual(back, m) {
		bb, _ := json.Marshal(back)
		t.Fatalf("back to 1.0:\n got %s\nwant %s", bb, in)
	}
}

func TestV1RejectsBadMessages(t *testing.T) {
	for _, c := range []struct{ in, err string }{
		{`{"role":"ROLE_USER","parts":[]}`, "messageId"},
		{`{"messageId":"m","role":"user","parts":[]}`, "ROLE_USER"},
		{`{"messageId":"m","role":"ROLE_USER","parts":[{"kind":"text"}]}`, "parts[0]"},
		{`{"messageId":"m","role":"ROLE_USER","parts":["hi"]}`, "parts[0]"},
	} {
		var m map[string]any
		if err := decodeJSON([]byte(c.in), &m); err != nil {
			t.Fatal(err)
		}
		if _, err := v1ToMessage(m); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: err %v, want %q", c.in, err, c.err)
		}
	}
}

// A 0.3 task, its states and events become 1.0's.
func TestV1Answers(t *testing.T) {
	var task map[string]any
	_ = decodeJSON([]byte(`{"kind":"task","id":"t1","contextId":"c1","status":{"state":"input-required","message":{"kind":"message","messageId":"m2","role":"agent","parts":[{"kind":"text","text":"ok?"}]}},
		"artifacts":[{"artifactId":"a1","name":"answer","parts":[{"kind":"text","text":"42"}]}]}`), &task)
	res, err := v1SendResult(task)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(res)
	want := `{"task":{"artifacts":[{"artifactId":"a1","name":"answer","parts":[{"text":"42"}]}],"contextId":"c1","id":"t1","status":{"message":{"messageId":"m2","parts":[{"text":"ok?"}],"role":"ROLE_AGENT"},"state":"TASK_STATE_INPUT_REQUIRED"}}}`
	if string(b) != want {
		t.Fatalf("task:\n got %s\nwant %s", b, want)
	}
	var ev map[string]any
	_ = decodeJSON([]byte(`{"kind":"artifact-update","taskId":"t1","contextId":"c1","append":true,"artifact":{"artifactId":"a1","parts":[{"kind":"text","text":"4"}]}}`), &ev)
	res, err = v1StreamEvent(ev)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(res)
	if want := `{"artifactUpdate":{"append":true,"artifact":{"artifactId":"a1","parts":[{"text":"4"}]},"contextId":"c1","taskId":"t1"}}`; string(b) != want {
		t.Fatalf("event:\n got %s\nwant %s", b, want)
	}
}
