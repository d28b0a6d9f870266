package node_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// A tool called outside any session (MCP's tools/call on /mcp, Node.CallTool)
// answers with the node's secrets redacted, as the same tool's result is in a
// session's events and its streamed deltas: server-everything's get-env, called
// through node serve's /mcp, answered the node's API tokens (TROUPE_AUTH_TOKENS)
// in plain text to any client holding one of them. Its error too.
func TestCallToolRedactsTheNodesSecrets(t *testing.T) {
	const secret = "tok-0123456789abcdefghij-secret"
	type args struct {
		Fail bool `json:"fail,omitempty"`
	}
	env, err := tools.Func("env", "Says the environment.", func(_ context.Context, a args) (string, error) {
		if a.Fail {
			return "", errors.New("cannot read TROUPE_AUTH_TOKENS=" + secret)
		}
		return `{"TROUPE_AUTH_TOKENS": "` + secret + `"}`, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	n := nodetest.Start(t, node.Config{DataDir: t.TempDir(), Tools: []tools.Tool{env}, Secrets: []string{secret}})
	out, err := n.CallTool(context.Background(), "", "env", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, secret) || !strings.Contains(out, "[REDACTED]") {
		t.Errorf("CallTool answered %q: the secret is not redacted", out)
	}
	_, err = n.CallTool(context.Background(), "", "env", `{"fail":true}`)
	if err == nil || strings.Contains(err.Error(), secret) {
		t.Errorf("CallTool's error %v: the secret is not redacted", err)
	}
}
