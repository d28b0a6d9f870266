package a2a

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A request whose Content-Length is above MaxBody is answered 413 at once, while
// its body is still on its way, and the connection closes: the server does not
// wait for a body it refuses.
func TestTooLargeIsRefusedBeforeItsBody(t *testing.T) {
	s, err := NewServer(&silentBackend{}, ServerConfig{MaxBody: 1000}, []AgentInfo{{Name: "default"}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for _, r := range s.Routes() {
		mux.Handle(r.Pattern, r.Handler)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "POST /a2a HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 2000\r\n\r\n{\"jsonrpc\":\"2.0\""); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer while the body is unsent: %v; want 413 at once", err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !resp.Close || !strings.Contains(string(raw), "larger than 1000 bytes") {
		t.Fatalf("%s (connection close %v): %q; want 413 saying the bound, closing the connection", resp.Status, resp.Close, raw)
	}
}
