package node_test

import (
	"net/http"
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
	for _, p := range []string{a2a.CardPath, "/a2a/helper" + a2a.CardPath} {
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
