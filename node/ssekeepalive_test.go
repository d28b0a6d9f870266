package node_test

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/node"
)

// An idle session stream and an idle session feed get keep-alive comments (a
// comment line alone), which extend their write deadline: each lives past its
// write timeout.
func TestIdleStreamsGetKeepAliveComments(t *testing.T) {
	n, base, _ := serveHTTP(t, node.Config{HTTP: node.HTTPConfig{WriteTimeout: 200 * time.Millisecond}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const session = "idle-keepalive"
	if _, err := n.Submit(ctx, node.Task{Input: "hello", SessionID: session}); err != nil {
		t.Fatal(err)
	}
	waitEnded(t, n, session)
	for _, path := range []string{"/v1/sessions/" + session + "/stream?deltas=false", "/v1/feed/sessions"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		comments, start := 0, time.Now()
		for comments < 5 && sc.Scan() {
			if line := sc.Text(); line == ": keep-alive" {
				comments++
			} else if strings.HasPrefix(line, ":") {
				t.Errorf("%s: comment %q", path, line)
			}
		}
		resp.Body.Close()
		if comments < 5 {
			t.Fatalf("%s: %d keep-alive comments before the stream ended (%v) after %s", path, comments, sc.Err(), time.Since(start))
		}
	}
}
