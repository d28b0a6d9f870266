package node_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/node"
)

// An approval whose body comes slower than the read timeout is answered 408, as a
// task, a memory or a document is, also when the write timeout passed first: the
// client learns why, rather than finding its connection closed with no answer.
func TestApprovalBodySentTooSlowlyIs408(t *testing.T) {
	_, base, _ := serveHTTP(t, node.Config{HTTP: node.HTTPConfig{ReadTimeout: 600 * time.Millisecond, WriteTimeout: 200 * time.Millisecond}})
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "POST /v1/sessions/s-1/approvals/call_1 HTTP/1.1\r\nHost: node\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"approve\""); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("an approval body sent too slowly: no answer (%v), want 408", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), "not sent in time") {
		t.Fatalf("an approval body sent too slowly: %d %s, want 408 saying so", resp.StatusCode, body)
	}
}
