package node_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/node"
)

// A request that no route takes is refused in JSON, as every other refusal of the
// API: 404 for a path no route has, 405 with Allow for a method its routes do not
// take, each with an error that says why.
func TestUnroutedRequestsAreAnsweredInJSON(t *testing.T) {
	_, base, _ := serveHTTP(t, node.Config{})
	for _, c := range []struct {
		method, path string
		code         int
		allow        string
	}{
		{"GET", "/v1/nope", http.StatusNotFound, ""},
		{"POST", "/v1/sessions/a/b/c", http.StatusNotFound, ""},
		{"GET", "/v1/tasks", http.StatusMethodNotAllowed, "POST"},
		{"PUT", "/v1/tasks", http.StatusMethodNotAllowed, "POST"},
		{"DELETE", "/v1/sessions/x", http.StatusMethodNotAllowed, "GET, HEAD"},
	} {
		req, err := http.NewRequest(c.method, base+c.path, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Error string `json:"error"`
		}
		derr := json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != c.code || resp.Header.Get("Content-Type") != "application/json" || derr != nil || body.Error == "" {
			t.Errorf("%s %s: %d %q (%v), error %q; want %d in JSON with an error", c.method, c.path, resp.StatusCode,
				resp.Header.Get("Content-Type"), derr, body.Error, c.code)
		}
		if got := resp.Header.Get("Allow"); got != c.allow {
			t.Errorf("%s %s: Allow %q, want %q", c.method, c.path, got, c.allow)
		}
	}
}

// A detail parameter that is no boolean is refused, as sessions_only is, rather
// than read as false.
func TestSessionListRefusesAMalformedDetail(t *testing.T) {
	_, base, _ := serveHTTP(t, node.Config{})
	for q, want := range map[string]int{"detail=maybe": 400, "detail=1": 200, "detail=false": 200, "sessions_only=maybe": 400} {
		resp, err := http.Get(base + "/v1/sessions?" + q)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("?%s: %d %s, want %d", q, resp.StatusCode, body, want)
		}
	}
}

// A login whose body comes slower than the read timeout is answered 408, as a task
// is, not 400 with the connection's error.
func TestLoginBodySentTooSlowlyIs408(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	_, base, _ := serveHTTP(t, node.Config{HTTP: node.HTTPConfig{ReadTimeout: 300 * time.Millisecond,
		Auth: node.AuthConfig{Tokens: []string{token}}}})
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "POST /v1/auth/login HTTP/1.1\r\nHost: node\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"token\""); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("a login body sent too slowly: %d %s, want 408", resp.StatusCode, body)
	}
}

// A body that comes slower than the read timeout is answered 408 on every route
// that takes one, also when the write timeout passes first (by default both are
// 30 s, and the write deadline, set once the headers are read, passed with the
// read deadline): the client learns why, rather than finding its connection
// closed with no answer.
func TestBodySentTooSlowlyIs408AfterTheWriteTimeout(t *testing.T) {
	_, base, _ := serveHTTP(t, node.Config{A2A: &node.A2AConfig{}, Memory: &memory.Config{}, Knowledge: &knowledge.Config{},
		HTTP: node.HTTPConfig{ReadTimeout: 600 * time.Millisecond, WriteTimeout: 200 * time.Millisecond}})
	for _, path := range []string{"/v1/tasks", "/v1/kb/handbook/documents", "/v1/memories", "/a2a"} {
		t.Run(path, func(t *testing.T) {
			c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(c, "POST "+path+" HTTP/1.1\r\nHost: node\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"input\""); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("a body sent too slowly: no answer (%v), want 408", err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), "not sent in time") {
				t.Fatalf("a body sent too slowly: %d %s, want 408 saying so", resp.StatusCode, body)
			}
		})
	}
}

// A stream of the log that is no session (here a dashboard sign-in's) has no status
// and runs no task: asking its status or cancelling it is 404, not a status of ""
// or a 400 about a task; its events are read as a session's are.
func TestStreamsThatAreNoSessionHaveNoStatus(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	_, base, _ := serveHTTP(t, node.Config{HTTP: node.HTTPConfig{Auth: node.AuthConfig{Tokens: []string{token}}}})
	if code, msg := postAs(t, base+"/v1/auth/login", "application/json", `{"token":"`+token+`"}`); code != http.StatusOK {
		t.Fatalf("login: %d %s", code, msg)
	}
	call := func(method, path string) (int, string) {
		req, err := http.NewRequest(method, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := call("GET", "/v1/sessions")
	var rows []struct {
		ID     string `json:"session_id"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal([]byte(body), &rows); code != http.StatusOK || err != nil {
		t.Fatalf("list: %d %s (%v)", code, body, err)
	}
	id := ""
	for _, r := range rows {
		if r.Status == node.SignInStatus {
			id = r.ID
		}
	}
	if id == "" {
		t.Fatalf("no sign-in stream listed: %s", body)
	}
	p := "/v1/sessions/" + url.PathEscape(id)
	for _, c := range []struct {
		method, path string
		want         int
	}{{"GET", p, http.StatusNotFound}, {"POST", p + "/cancel", http.StatusNotFound}, {"POST", p + "/approvals/call_1", http.StatusNotFound}, {"GET", p + "/events", http.StatusOK}} {
		if code, body := call(c.method, c.path); code != c.want {
			t.Errorf("%s %s: %d %s, want %d", c.method, c.path, code, body, c.want)
		}
	}
}

// A task body that is not UTF-8 (Latin-1 sent as JSON) is refused with the offset
// of its first bad byte, rather than run on text where each bad byte became U+FFFD;
// nothing is recorded.
func TestTaskBodyNotUTF8IsRefused(t *testing.T) {
	n, base, _ := serveHTTP(t, node.Config{})
	code, msg := postAs(t, base+"/v1/tasks", "application/json", "{\"input\": \"caf\xe9 cr\xe8me\"}")
	if code != http.StatusBadRequest || !strings.Contains(msg, "UTF-8") || !strings.Contains(msg, "byte 14") {
		t.Fatalf("a Latin-1 body: %d %q, want 400 naming UTF-8 and byte 14", code, msg)
	}
	noSessions(t, n)
	if code, msg := postAs(t, base+"/v1/tasks", "application/json", `{"input": "echo café \ufffd"}`); code != http.StatusAccepted {
		t.Fatalf("a UTF-8 body: %d %q", code, msg)
	}
}

// A body that takes longer than the read timeout is read to its end while it keeps
// arriving at the minimum rate (a large upload over a modest link), and a trickle
// below that rate is still cut and answered 408. The timeouts are scaled down: a
// 300 ms read timeout, 1 KiB/s.
func TestSteadySlowBodyIsReadAndTrickleIs408(t *testing.T) {
	_, base, _ := serveHTTP(t, node.Config{HTTP: node.HTTPConfig{ReadTimeout: 300 * time.Millisecond,
		MinBodyRate: 1 << 10, MaxBodyTime: time.Minute, WriteTimeout: 5 * time.Second}})
	send := func(pieces []string, every time.Duration) (*http.Response, string) {
		t.Helper()
		c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		n := 0
		for _, p := range pieces {
			n += len(p)
		}
		if _, err := fmt.Fprintf(c, "POST /v1/tasks HTTP/1.1\r\nHost: node\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", n); err != nil {
			t.Fatal(err)
		}
		// The client's pace: a piece each tick, until the server answers.
		answered := make(chan struct{})
		go func() {
			tick := time.NewTicker(every)
			defer tick.Stop()
			for _, p := range pieces {
				select {
				case <-answered:
					return
				case <-tick.C:
				}
				if _, err := io.WriteString(c, p); err != nil {
					return
				}
			}
		}()
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		close(answered)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(body)
	}

	// About 2 KiB/s for 3 s: ten read timeouts, at twice the minimum rate.
	steady := []string{`{"input": "echo `}
	for range 60 {
		steady = append(steady, strings.Repeat("a", 100))
	}
	steady = append(steady, `"}`)
	if resp, body := send(steady, 50*time.Millisecond); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("a body sent steadily at twice the minimum rate: %d %s, want 202", resp.StatusCode, body)
	}

	// Ten bytes a second: cut, and told why.
	trickle := []string{`{"input": "echo `}
	for range 100 {
		trickle = append(trickle, "a")
	}
	trickle = append(trickle, `"}`)
	if resp, body := send(trickle, 100*time.Millisecond); resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(body, "not sent in time") {
		t.Fatalf("a body trickled a byte each 100 ms: %d %s, want 408 saying so", resp.StatusCode, body)
	}
}
