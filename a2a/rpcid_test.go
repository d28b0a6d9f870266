package a2a

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
)

// answerID posts body (with the A2A-Version header version, if any) and returns
// the id and the error code of the answer: a JSON answer's, or a stream's first
// event's.
func answerID(t *testing.T, url, version, body string) (id string, code int, result bool) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if version != "" {
		req.Header.Set(VersionHeader, version)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var data []byte
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				data = []byte(d)
				break
			}
		}
	} else if data, err = io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	var out struct {
		ID     json.RawMessage `json:"id"`
		Result json.RawMessage `json:"result"`
		Error  struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("answer %q: %v", data, err)
	}
	return string(out.ID), out.Error.Code, out.Result != nil
}

// A request's id is answered as it was sent (JSON-RPC 2.0: the same id), by the
// SDK's handler as by the refusals of this server, JSON answers and streams, 0.3
// and 1.0 methods: a number keeps its digits (1.0 is not 1, 12345678901234567890
// not 12345678901234567000, and 1e400, which no float64 holds, is an id all the
// same), a string its escapes. The id is the member named "id", exactly: "ID"
// and "Id" are other members, whatever their place.
func TestRequestIDIsEchoedAsSent(t *testing.T) {
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
	send := `{"message":{"kind":"message","messageId":"m-1","role":"user","parts":[{"kind":"text","text":"hi"}]},"configuration":{"blocking":false}}`
	unknownPart := `{"message":{"kind":"message","messageId":"m-2","role":"user","parts":[{"kind":"nope","text":"hi"}]}}`
	calls := []struct {
		name, version, method, params string
		code                          int // of the error, 0 for a result
	}{
		{"a result of the SDK", "", "message/send", send, 0},
		{"an error of the SDK", "", "tasks/get", `{"id":"no-such-task"}`, -32001},
		{"a stream's error of the SDK", "", "tasks/resubscribe", `{"id":"no-such-task"}`, -32001},
		{"a refusal", "", "message/send", unknownPart, -32602},
		{"a stream's refusal", "", "message/stream", unknownPart, -32602},
		{"a version refused", "9.9", "tasks/get", `{"id":"t"}`, -32009},
		{"an invalid request", "", "", `{"id":"t"}`, -32600},
		{"a 1.0 error", "1.0", "GetTask", `{"id":"no-such-task"}`, -32001},
		{"a 1.0 refusal", "1.0", "GetTask", `{}`, -32602},
	}
	ids := []string{`1`, `1.0`, `-0`, `12345678901234567890`, `1e400`, `"req-7"`, `"\u0069d"`, `"a<b>&c"`, `"\ud83d\ude00 é\n"`, `null`}
	for _, c := range calls {
		for _, id := range ids {
			head := `{"jsonrpc":"2.0","method":"` + c.method + `"`
			if c.method == "" {
				head = `{"jsonrpc":"1.0"`
			}
			got, code, result := answerID(t, srv.URL+"/a2a", c.version, head+`,"id":`+id+`,"params":`+c.params+`}`)
			if got != id || code != c.code || (c.code == 0) != result {
				t.Errorf("%s, id %s: answered id %s, code %d (a result %v); want id %s, code %d", c.name, id, got, code, result, id, c.code)
			}
		}
	}
	for _, c := range []struct{ members, want string }{
		{`"ID":5`, `null`},
		{`"Id":"x"`, `null`},
		{`"ID":5,"id":"x"`, `"x"`},
		{`"id":"x","ID":5`, `"x"`},
		{`"id":"x","Id":[1]`, `"x"`},
		{`"ID":[1],"id":2.50`, `2.50`},
	} {
		for _, call := range calls[:3] {
			want := call.code
			if c.want == `null` {
				// No member "id": a JSON-RPC notification, which A2A has not;
				// it is refused and runs nothing.
				want = -32600
			}
			got, code, _ := answerID(t, srv.URL+"/a2a", "", `{"jsonrpc":"2.0","method":"`+call.method+`",`+c.members+`,"params":`+call.params+`}`)
			if got != c.want || code != want {
				t.Errorf("%s, members %s: answered id %s, code %d; want id %s, code %d", call.name, c.members, got, code, c.want, want)
			}
		}
	}
}

// Reading a request's id, and making the body the SDK reads, copy none of its
// params: a request of 1 MiB is not copied twice more for its id.
func TestRequestIDCopiesNoParams(t *testing.T) {
	params := `{"message":{"kind":"message","messageId":"m-1","role":"user","parts":[{"kind":"text","text":"` + strings.Repeat("a", 1<<20) + `"}]}}`
	body := []byte(`{"jsonrpc":"2.0","id":"req-1","method":"message/send","params":` + params + `}`)
	allocated := func(f func()) uint64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range 4 {
			f()
		}
		runtime.ReadMemStats(&after)
		return (after.TotalAlloc - before.TotalAlloc) / 4
	}
	var id json.RawMessage
	if n := allocated(func() { id, _ = requestID(body) }); n > 64<<10 || string(id) != `"req-1"` {
		t.Errorf("requestID allocated %d bytes for a body of %d, read id %s; want at most 64 KiB, id \"req-1\"", n, len(body), id)
	}
	raw := json.RawMessage(params)
	n := allocated(func() {
		if _, size, _, _ := echoID(httptest.NewRecorder(), id, "message/send", raw); size < int64(len(params)) {
			t.Fatalf("echoID made a body of %d bytes for params of %d", size, len(params))
		}
	})
	if n > 64<<10 {
		t.Errorf("echoID allocated %d bytes for params of %d; want at most 64 KiB", n, len(params))
	}
	r, size, token, _ := echoID(httptest.NewRecorder(), id, "message/send", raw)
	got, err := io.ReadAll(r)
	if err != nil || int64(len(got)) != size {
		t.Fatalf("echoID's body: %d bytes, %v; size %d", len(got), err, size)
	}
	var req struct {
		JSONRPC, Method string
		ID              any
		Params          json.RawMessage
	}
	if err := json.Unmarshal(got, &req); err != nil || req.JSONRPC != "2.0" || req.Method != "message/send" || req.ID != token || string(req.Params) != params {
		t.Errorf("echoID's body read as %+v (%v); want the request with id %v", req.ID, err, token)
	}
}

// guard reads a request's id and tells a body that is not JSON in one pass
// (readRequestID): it decoded the body a time more, into a json.RawMessage, a
// copy of it whole, to tell a parse error. What it allocates for a request of 1
// MiB up to the handler after it is, besides reading the body, one copy of the
// params (the request's members, read as the SDK reads them), not two.
func TestGuardCopiesTheBodyOnceForItsMembers(t *testing.T) {
	params := `{"id":"task-1","historyLength":1,"pad":"` + strings.Repeat("a", 1<<20) + `"}`
	body := []byte(`{"jsonrpc":"2.0","id":"req-1","method":"tasks/get","params":` + params + `}`)
	allocated := func(f func()) uint64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range 4 {
			f()
		}
		runtime.ReadMemStats(&after)
		return (after.TotalAlloc - before.TotalAlloc) / 4
	}
	read := allocated(func() {
		_, _ = io.ReadAll(http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(bytes.NewReader(body)), 4<<20))
	})
	s := &Server{cfg: ServerConfig{MaxBody: 4 << 20}}
	reached := false
	h := s.guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached = true }))
	n := allocated(func() {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/a2a", bytes.NewReader(body)))
	})
	if !reached {
		t.Fatal("guard did not hand the request on")
	}
	if n < read || n-read > uint64(len(params))*3/2 {
		t.Errorf("guard allocated %d bytes for a request of %d, %d of them reading it; want at most one copy of its params (%d) besides", n, len(body), read, len(params))
	}
}
