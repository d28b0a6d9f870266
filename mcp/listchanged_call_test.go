package mcp_test

import (
	"testing"

	"github.com/troupe-run/troupe/mcp"
)

// A server that changes its tools in a call says so (list_changed) before it
// answers: the call returns once the catalog has the new list, so that the agent's
// next model request, built the moment the result is in, offers the new tool and a
// call of it is not refused as unknown (a dynamic toolset enabled by a tool call).
func TestCallThatChangesTheToolListReturnsWithTheNewList(t *testing.T) {
	c := startClient(t, map[string]mcp.ServerConfig{"hostile": testServer(t, "hostile")}, nil)
	if _, ok := c.Tool("hostile__extra"); ok {
		t.Fatal("hostile__extra is in the catalog before grow")
	}
	mustCall(t, c, "hostile__grow", "{}")
	if _, ok := c.Tool("hostile__extra"); !ok {
		t.Fatalf("grow answered after its list_changed, yet the catalog lacks hostile__extra: %v", names(c))
	}
}
