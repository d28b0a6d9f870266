package node_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A token the tokens file drops (ReloadTokens, node serve's SIGHUP) no longer
// opens the API: its new requests are 401. A stream it opened before the reload
// (a session's events, the feed of sessions) must end too, or the holder of a
// revoked token keeps reading every session's changes for as long as it likes.
func TestStreamsOfADroppedTokenEnd(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte(goodToken+"\n"+otherToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n, base, _ := authNode(t, node.HTTPConfig{Auth: node.AuthConfig{TokensFile: file}})
	nodetest.Run(t, n, "s1", "hello")
	for _, path := range []string{"/v1/feed/sessions", "/v1/sessions/s1/stream"} {
		t.Run(path, func(t *testing.T) {
			if err := os.WriteFile(file, []byte(goodToken+"\n"+otherToken+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := n.ReloadTokens(); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", base+path, nil)
			req.Header.Set("Authorization", "Bearer "+goodToken)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET %s: %d", path, resp.StatusCode)
			}
			ended := make(chan struct{})
			go func() { io.Copy(io.Discard, resp.Body); close(ended) }()
			if err := os.WriteFile(file, []byte(otherToken+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := n.ReloadTokens(); err != nil {
				t.Fatal(err)
			}
			if code, _, _ := doCall(t, "GET", base+path, goodToken, ""); code != http.StatusUnauthorized {
				t.Fatalf("a new request with the dropped token: %d, want 401", code)
			}
			select {
			case <-ended:
			case <-time.After(5 * time.Second):
				t.Errorf("GET %s: the stream of the dropped token is still open after the reload", path)
			}
		})
	}
}
