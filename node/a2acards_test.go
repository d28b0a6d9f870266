package node_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/node"
)

// With API tokens, every A2A agent card is open (README: "the cards themselves
// need none"; the route's doc: "open without a token"), as it tells a client how to
// authenticate; each card's endpoint needs the token.
func TestEveryA2ACardIsOpenWithTokens(t *testing.T) {
	_, base := a2aNode(t, node.Config{Model: llm.Offline{}, HTTP: node.HTTPConfig{Auth: node.AuthConfig{Tokens: []string{goodToken}}},
		Agents: []node.NamedAgent{{Name: "helper", Description: "helps", Tools: []string{}}}})
	for _, p := range []string{a2a.CardPath, "/a2a/helper" + a2a.CardPath, a2a.LegacyCardPath, "/a2a/helper" + a2a.LegacyCardPath} {
		if code, _, body := doCall(t, "GET", base+p, "", ""); code != http.StatusOK {
			t.Errorf("GET %s without a token: %d %s, want 200", p, code, body)
		}
	}
	for _, p := range []string{"/a2a", "/a2a/helper"} {
		if code, _, _ := doCall(t, "POST", base+p, "", `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"x"}}`); code != http.StatusUnauthorized {
			t.Errorf("POST %s without a token: %d, want 401", p, code)
		}
	}
}

// A2A 0.2's card path (/.well-known/agent.json, which 0.3 moved to
// /.well-known/agent-card.json) serves the same card, the node's and each named
// agent's, for the clients and registries that still look for it there.
func TestA2ACardIsServedAtA2A02sPathToo(t *testing.T) {
	_, base := a2aNode(t, node.Config{Model: llm.Offline{}, Agents: []node.NamedAgent{{Name: "helper", Description: "helps", Tools: []string{}}}})
	for _, prefix := range []string{"", "/a2a/helper"} {
		code, _, current := doCall(t, "GET", base+prefix+a2a.CardPath, "", "")
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", prefix+a2a.CardPath, code, current)
		}
		code, h, legacy := doCall(t, "GET", base+prefix+a2a.LegacyCardPath, "", "")
		if code != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), "application/json") || legacy != current {
			t.Fatalf("GET %s: %d (%s) %s, want the card of %s: %s", prefix+a2a.LegacyCardPath, code, h.Get("Content-Type"), legacy, prefix+a2a.CardPath, current)
		}
	}
}
