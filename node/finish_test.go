package node_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A task whose final answer the provider ended for a reason of its own (Gemini's
// safety, withholding the text; malformed_function_call) fails, and says so to
// whoever asks for its status, rather than completing with what the provider let
// through.
func TestATaskWhoseAnswerTheProviderEndedFails(t *testing.T) {
	for _, c := range []struct {
		finish, content, reason, says string
	}{
		{"safety", "", messages.ReasonContentFilter, `content filter stopped the model's answer (finish_reason "safety")`},
		{"malformed_function_call", "", messages.ReasonAnswerUnfinished, `(finish_reason "malformed_function_call")`},
		{"other", "The answer is", messages.ReasonAnswerUnfinished, `(finish_reason "other"): The answer is`},
	} {
		t.Run(c.finish, func(t *testing.T) {
			n := nodetest.Start(t, node.Config{Model: a2aScript(t, llm.ScriptStep{Content: c.content, FinishReason: c.finish})})
			srv := httptest.NewServer(n.Handler())
			t.Cleanup(srv.Close)
			code, out := post(t, srv.URL+"/v1/tasks", `{"input":"Tell me a story."}`)
			if code != http.StatusAccepted {
				t.Fatalf("POST: %d %v", code, out)
			}
			r := waitDone(t, srv.URL, out["session_id"])
			if r.Status != messages.StatusFailed || r.Reason != c.reason || !strings.Contains(r.Error, c.says) || r.Output != "" {
				t.Fatalf("result %+v; want failed, %s, saying %q", r, c.reason, c.says)
			}
		})
	}
}
