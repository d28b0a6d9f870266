package a2a

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
)

// A request nested deeper than encoding/json reads (a data part 10,000 deep) is
// valid JSON whose id is readable at its top level: it is answered with that id,
// as invalid params saying how deep it is, not as a parse error of id null, which
// a client cannot match to its request. A body that is not JSON stays a parse
// error.
func TestTooDeepRequestIsAnsweredWithItsID(t *testing.T) {
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
	deep := strings.Repeat(`{"k":`, 10000) + "1" + strings.Repeat("}", 10000)
	message := func(data string) string {
		return `{"message":{"kind":"message","messageId":"m-1","role":"user","parts":[{"kind":"data","data":` + data + `}]}}`
	}
	for _, c := range []struct {
		name, body string
		id         any
		code       int
		says       string
	}{
		{"data part", `{"jsonrpc":"2.0","id":"req-7","method":"message/send","params":` + message(deep) + `}`, "req-7", -32602, "invalid params of message/send: they nest objects and arrays 10005 levels deep"},
		{"id after params", `{"jsonrpc":"2.0","method":"message/send","params":` + message(deep) + `,"id":42}`, 42.0, -32602, "10005 levels deep"},
		{"other member", `{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{"id":"t"},"x":` + deep + `}`, 3.0, -32600, `"x" nests objects and arrays 10001 levels deep`},
		{"an id that is no id", `{"jsonrpc":"2.0","id":[1],"method":"message/send","params":` + message(deep) + `}`, nil, -32602, "10005 levels deep"},
		{"not JSON", `{"jsonrpc":"2.0","id":5,"method":"message/send","params":` + message(deep) + `,}`, nil, -32700, "parse error"},
		{"two values", `{"jsonrpc":"2.0","id":5,"method":"message/send","params":` + message(deep) + `} {}`, nil, -32700, "parse error"},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, err := http.Post(srv.URL+"/a2a", "application/json", strings.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var out struct {
				ID    any `json:"id"`
				Error struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
				t.Fatal(err)
			}
			if out.ID != c.id || out.Error.Code != c.code || !strings.Contains(out.Error.Message, c.says) {
				t.Fatalf("answer: id %v, %d %q; want id %v, %d saying %q", out.ID, out.Error.Code, out.Error.Message, c.id, c.code, c.says)
			}
		})
	}
}

// The id of a too-deep request is echoed as it was sent, a number's digits
// included (1.0, 1e400, an integer past float64's precision), and a number that
// float64 cannot hold is no reason to call the body a parse error: it is valid
// JSON.
func TestTooDeepRequestEchoesItsIDAsSent(t *testing.T) {
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
	deep := strings.Repeat("[", 10001) + "1e400" + strings.Repeat("]", 10001)
	for _, id := range []string{`1.0`, `1e400`, `12345678901234567890`, `-0`, `"\u0069d"`} {
		t.Run(id, func(t *testing.T) {
			body := `{"jsonrpc":"2.0","id":` + id + `,"method":"tasks/get","params":{"id":"t","x":` + deep + `}}`
			resp, err := http.Post(srv.URL+"/a2a", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var out struct {
				ID    json.RawMessage `json:"id"`
				Error struct {
					Code int `json:"code"`
				} `json:"error"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
				t.Fatal(err)
			}
			if string(out.ID) != id || out.Error.Code != -32602 {
				t.Fatalf("answered id %s, %d; want id %s, -32602", out.ID, out.Error.Code, id)
			}
		})
	}
}

// A body that is not JSON for another reason than its depth (an unterminated
// string of escapes, a list that never closes at depth one) is answered as a
// parse error without the deep scan, which reads it token by token, allocating
// some tens of bytes each: a megabyte of it cost tens of megabytes and a tenth
// of a second of every request.
func TestBodyThatIsNotJSONIsNotScannedForItsDepth(t *testing.T) {
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"message/send","params":"` + strings.Repeat(`\"`, 1<<19),
		`{"jsonrpc":"2.0","id":1,"method":"message/send","params":[` + strings.Repeat(`"ab",`, 1<<18),
	} {
		b := []byte(body)
		var raw json.RawMessage
		err := json.Unmarshal(b, &raw)
		if err == nil {
			t.Fatal("the body parsed")
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, ok := scanDeepRequest(b, err)
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; ok || n > 1<<20 {
			t.Errorf("%.40s...: scanned as too deep %v, allocating %d bytes; want no scan", body, ok, n)
		}
	}
}

// The deep scan reads a body valid but for one deep member as encoding/json
// reads the same body with that member shallow: the same id (as sent), method
// and validity, whatever the other members hold (escaped keys, duplicates, big
// numbers, ids of every kind); and it never panics.
func FuzzScanDeepRequest(f *testing.F) {
	for _, s := range []string{
		`"id":1,"method":"message/send"}`,
		`"\u0069d":"x","method":"tasks/get","params":{}}`,
		`"id":"a","id":{"x":1},"method":1}`,
		`"id":1e400,"method":"m\"x"}`,
		`"id":12345678901234567890, "method" : "m" }`,
		`"id":[1],"x":"\ud800"}`,
		`"id":null}`,
		`"id":"unterminated}`,
		`"id":1,}`,
		`"ID":1}`,
		`"id":1} {}`,
		`"k\"id":-0.0e-0}`,
	} {
		f.Add(s)
	}
	prefix := `{"d":` + strings.Repeat("[", maxJSONDepth) + strings.Repeat("]", maxJSONDepth) + ","
	f.Fuzz(func(t *testing.T, rest string) {
		deep := []byte(prefix + rest)
		var raw json.RawMessage
		err := json.Unmarshal(deep, &raw)
		if !tooDeep(err) {
			t.Fatalf("the deep body is refused otherwise: %v", err)
		}
		got, ok := scanDeepRequest(deep, err)
		var shallow map[string]json.RawMessage
		if json.Unmarshal([]byte(`{"d":[],`+rest), &shallow) != nil {
			if ok {
				t.Fatalf("%q: read as a deep request %+v, though not JSON", rest, got)
			}
			return
		}
		if !ok || got.member != "d" || got.depth != maxJSONDepth+1 {
			t.Fatalf("%q: ok %v, member %q %d deep; want the deep member d", rest, ok, got.member, got.depth)
		}
		var wantID any
		if id, has := shallow["id"]; has {
			switch id[0] {
			case '"', 'n', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
				wantID = id
			}
		}
		gotID, _ := got.id.(json.RawMessage)
		if wantID == nil && got.id != nil || wantID != nil && string(gotID) != string(wantID.(json.RawMessage)) {
			t.Fatalf("%q: id %s, want %s", rest, got.id, wantID)
		}
		var method string
		_ = json.Unmarshal(shallow["method"], &method)
		if got.method != method {
			t.Fatalf("%q: method %q, want %q", rest, got.method, method)
		}
	})
}
