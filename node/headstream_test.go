package node_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// HEAD of a live stream (a monitor's check, a client's probe) is answered with the
// stream's headers and ends: net/http discards a HEAD answer's body, so a stream
// that went on would hold its connection for ever, and the next request the
// client sends on it (a kept-alive connection, as every default client keeps)
// would never be answered.
func TestHeadOfAStreamEndsAndTheConnectionServesTheNextRequest(t *testing.T) {
	n, base, _ := serveHTTP(t, node.Config{})
	nodetest.Run(t, n, "head-1", "hello")
	for _, c := range []struct {
		path string
		code int
	}{
		{"/v1/sessions/head-1/stream", http.StatusOK},
		{"/v1/feed/sessions", http.StatusOK},
		{"/v1/sessions/nobody/stream", http.StatusNotFound},
	} {
		t.Run(c.path, func(t *testing.T) {
			tr := &http.Transport{MaxConnsPerHost: 1}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			resp, err := client.Head(base + c.path)
			if err != nil {
				t.Fatalf("HEAD %s: %v", c.path, err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.code {
				t.Errorf("HEAD %s: %d, want %d", c.path, resp.StatusCode, c.code)
			}
			if c.code == http.StatusOK && resp.Header.Get("Content-Type") != "text/event-stream" {
				t.Errorf("HEAD %s: Content-Type %q, want the stream's", c.path, resp.Header.Get("Content-Type"))
			}
			resp, err = client.Get(base + "/healthz")
			if err != nil {
				t.Fatalf("GET /healthz on the connection of HEAD %s: %v", c.path, err)
			}
			resp.Body.Close()
		})
	}
}
