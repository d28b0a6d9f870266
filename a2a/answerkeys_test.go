package a2a

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// An approval answer's data part that names "approve" twice, or miscased, is
// refused, over 0.3's message/send and 1.0's SendMessage alike: the SDK decodes
// the data before the answer is read, the last member winning, so
// {"approve":false,"approve":true} approved the call.
func TestAnAnswerWithARepeatedOrMiscasedMemberIsRefused(t *testing.T) {
	s, err := NewServer(&silentBackend{}, ServerConfig{}, []AgentInfo{{Name: "default"}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for _, r := range s.Routes() {
		mux.Handle(r.Pattern, r.Handler)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	rpc := func(method, params string) (code int, msg string) {
		t.Helper()
		body := `{"jsonrpc":"2.0","id":1,"method":"` + method + `","params":` + params + `}`
		resp, err := http.Post(srv.URL+"/a2a", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var r struct {
			Error *struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(raw, &r); err != nil || r.Error == nil {
			return 0, string(raw)
		}
		return r.Error.Code, r.Error.Message
	}
	for _, data := range []string{
		`{"approve":false,"approve":true}`,
		`{"approve":false,"Approve":true}`,
		`{"approve":true,"reason":"a","REASON":"b"}`,
	} {
		v03 := `{"message":{"kind":"message","messageId":"m1","role":"user","taskId":"t1","parts":[{"kind":"data","data":` + data + `}]}}`
		if code, msg := rpc("message/send", v03); code != -32602 || !strings.Contains(msg, "twice or but for case") {
			t.Errorf("0.3 %s: %d %q, want -32602 naming the member", data, code, msg)
		}
		v1 := `{"message":{"messageId":"m1","role":"ROLE_USER","taskId":"t1","parts":[{"data":` + data + `}]}}`
		if code, msg := rpc("SendMessage", v1); code != -32602 || !strings.Contains(msg, "twice or but for case") {
			t.Errorf("1.0 %s: %d %q, want -32602 naming the member", data, code, msg)
		}
	}
	// An answer written plainly, and data that is no answer, pass the check.
	for _, data := range []string{`{"approve":false,"reason":"no"}`, `{"Approval":1,"items":[{"approve":1},{"approve":2}]}`} {
		if err := checkAnswerMembers(json.RawMessage(`{"message":{"parts":[{"kind":"data","data":` + data + `}]}}`)); err != nil {
			t.Errorf("%s: %v", data, err)
		}
	}
}
