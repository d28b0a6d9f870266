package node_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm/gateway"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A quota of an agent the node does not have (a typo: "agent:asistant") never
// refuses a call: the node says so as it starts, naming the quota and its agents.
// It kept silent, and the agent meant spent without a bound.
func TestQuotaOfAnAgentTheNodeLacksIsLogged(t *testing.T) {
	var logs syncBuffer
	nodetest.Start(t, node.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Agents: []node.NamedAgent{{Name: "assistant"}},
		Gateway: gateway.Config{Quotas: []gateway.Quota{
			{Scope: "agent:asistant", Tokens: 10, Window: time.Hour},
			{Scope: "agent:assistant", Tokens: 10, Window: time.Hour},
			{Scope: "agent:default", Tokens: 10, Window: time.Hour},
			{Scope: "agent:*", Tokens: 10, Window: time.Hour}}}})
	out := logs.String()
	if !strings.Contains(out, "agent:asistant") {
		t.Errorf("the log does not name the quota of agent:asistant, which no agent of the node has:\n%s", out)
	}
	for _, known := range []string{"quota=agent:assistant", "quota=agent:default", "quota=agent:*"} {
		if strings.Contains(out, known) {
			t.Errorf("a quota of an agent the node has is logged (%s):\n%s", known, out)
		}
	}
}
