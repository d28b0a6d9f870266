package node_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// TestLoneSurrogateEscapesAreRefused: a \u escape of a UTF-16 surrogate that is
// not half of a pair ("\ud800") is valid JSON but no character, and encoding/json
// reads it as U+FFFD. A task with one in its input was accepted and ran on
// another text than the one sent, and an approval's reason was recorded so,
// where a body that is not UTF-8, which comes to the same, is refused (400). A
// pair ("\ud83d\ude00") and an escaped backslash before a u ("\\ud800") are
// text and are taken.
func TestLoneSurrogateEscapesAreRefused(t *testing.T) {
	n := nodetest.Start(t, node.Config{})
	api := httptest.NewServer(n.Handler())
	t.Cleanup(api.Close)
	post := func(path, body string) (int, string) {
		t.Helper()
		resp, err := http.Post(api.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, input := range []string{`a \ud800 b`, `a \uDC00`, `\ud800\u0041`, `\ud800\ud800`, `x\ud83d`} {
		code, msg := post("/v1/tasks", `{"input":"`+input+`"}`)
		if code != http.StatusBadRequest || !strings.Contains(msg, "surrogate") {
			t.Errorf("input %s: %d %s, want 400 naming the lone surrogate", input, code, msg)
		}
	}
	for _, input := range []string{`a \ud83d\ude00 b`, `a \\ud800 b`, `\u00e9\u0041`} {
		if code, msg := post("/v1/tasks", `{"input":"`+input+`"}`); code != http.StatusAccepted {
			t.Errorf("input %s: %d %s, want 202", input, code, msg)
		}
	}
	code, msg := post("/v1/sessions/lone-surrogate/approvals/call-1", `{"approve":false,"reason":"no \udfff"}`)
	if code != http.StatusBadRequest || !strings.Contains(msg, "surrogate") {
		t.Errorf("approval with a lone surrogate in its reason: %d %s, want 400 naming it", code, msg)
	}
}
