package node_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/node"
)

// While a node waits for a data lock another process holds, a node with API
// tokens tells the holder's pid and the lock file's path only to a request that
// carries one of its tokens: /healthz (public) and the 503 of every other route
// told any caller both, which are the operator's to know. Any other request is
// told it waits for the data lock; a node without tokens tells everyone, as before.
func TestStartingNodeTellsTheLockHolderOnlyToItsClients(t *testing.T) {
	dir := t.TempDir()
	holder := os.Getppid() // a live process other than this one
	if err := os.WriteFile(filepath.Join(dir, "LOCK"), []byte(strconv.Itoa(holder)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const token = "0123456789abcdef0123456789abcdef"
	get := func(h http.Handler, path, bearer string) (int, string) {
		t.Helper()
		r := httptest.NewRequest(http.MethodGet, path, nil)
		if bearer != "" {
			r.Header.Set("Authorization", "Bearer "+bearer)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		b, _ := io.ReadAll(w.Result().Body)
		return w.Code, string(b)
	}
	detail := "pid " + strconv.Itoa(holder)
	closed := node.StartingHandler(node.Config{DataDir: dir, HTTP: node.HTTPConfig{Auth: node.AuthConfig{Tokens: []string{token}}}})
	for _, path := range []string{"/healthz", "/v1/tasks"} {
		for _, bearer := range []string{"", "not-the-token-0123456789"} {
			code, body := get(closed, path, bearer)
			if code != http.StatusServiceUnavailable || !strings.Contains(body, "waiting for the data lock") ||
				strings.Contains(body, detail) || strings.Contains(body, dir) {
				t.Fatalf("GET %s with token %q on a node with tokens: %d %s; want 503 saying it waits for the data lock, naming neither holder nor path", path, bearer, code, body)
			}
		}
		code, body := get(closed, path, token)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, detail) || !strings.Contains(body, "LOCK") {
			t.Fatalf("GET %s with the token: %d %s; want 503 naming the holder and the lock", path, code, body)
		}
	}
	open := node.StartingHandler(node.Config{DataDir: dir})
	if code, body := get(open, "/healthz", ""); code != http.StatusServiceUnavailable || !strings.Contains(body, detail) {
		t.Fatalf("GET /healthz on a node without tokens: %d %s; want 503 naming the holder", code, body)
	}
}
