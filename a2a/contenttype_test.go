package a2a

import (
	"encoding/json"
	"mime"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Every JSON-RPC answer that is not a stream is application/json, as the A2A
// specification has JSON-RPC's requests and responses: the SDK's handler writes
// its answers (a task, an error it raises itself such as -32001 or -32601) without
// a type, which net/http called text/plain. A stream stays text/event-stream.
func TestJSONRPCAnswersAreApplicationJSON(t *testing.T) {
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
	for _, c := range []struct{ name, body, want string }{
		{"tasks/get of an unknown task", `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"nope"}}`, "application/json"},
		{"tasks/cancel of an unknown task", `{"jsonrpc":"2.0","id":"c","method":"tasks/cancel","params":{"id":"nope"}}`, "application/json"},
		{"an unknown method", `{"jsonrpc":"2.0","id":2,"method":"tasks/nope","params":{}}`, "application/json"},
		{"a 1.0 GetTask", `{"jsonrpc":"2.0","id":3,"method":"GetTask","params":{"id":"nope"}}`, "application/json"},
		{"a resubscribe", `{"jsonrpc":"2.0","id":4,"method":"tasks/resubscribe","params":{"id":"nope"}}`, "text/event-stream"},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, err := http.Post(srv.URL+"/a2a", "application/json", strings.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
			if mt != c.want {
				t.Errorf("Content-Type %q, want %s", resp.Header.Get("Content-Type"), c.want)
			}
			if c.want == "application/json" {
				var out map[string]any
				if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out["jsonrpc"] != "2.0" {
					t.Errorf("answer %v: %v", out, err)
				}
			}
		})
	}
}
