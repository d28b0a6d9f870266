package node_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/node"
)

// A 404 for an unknown session echoes a bounded part of its ID (its first 128
// bytes, cut at a character's start, and "…"), not the whole ID, which a path may
// make a megabyte long. (An approval refuses an ID of the wrong shape, 400, as
// boundedly.)
func TestUnknownSessionAnswerEchoesABoundedID(t *testing.T) {
	_, base, _ := serveHTTP(t, node.Config{})
	for _, id := range []string{strings.Repeat("s", 1<<20), "x" + strings.Repeat("é", 1<<17)} {
		for _, c := range []struct{ method, path string }{
			{"GET", "/v1/sessions/" + id},
			{"POST", "/v1/sessions/" + id + "/cancel"},
			{"POST", "/v1/sessions/" + id + "/approvals/call_1"},
			{"GET", "/v1/sessions/" + id + "/stream"},
		} {
			req, err := http.NewRequest(c.method, base+c.path, strings.NewReader(`{"approve":true}`))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			what := c.method + " " + c.path[:40] + "…"
			if resp.StatusCode != http.StatusNotFound && !(resp.StatusCode == http.StatusBadRequest && strings.Contains(c.path, "/approvals/")) {
				t.Errorf("%s: %d %.200s, want 404", what, resp.StatusCode, body)
				continue
			}
			if len(body) > 512 || !strings.Contains(string(body), id[:61]) || !strings.Contains(string(body), "…") {
				t.Errorf("%s: a %d-byte answer %.300s; want the ID's first bytes and …", what, len(body), body)
			}
		}
	}
}
