package node_test

import (
	"testing"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/node"
)

// The log's streams that are no sessions are listed with their kind as status, an
// MCP client's session's among them; a session keeps its own.
func TestMarkStreamsNamesEachKind(t *testing.T) {
	infos := []eventlog.SessionInfo{
		{ID: "s-1", Status: "running"},
		{ID: eventlog.MCPSessionStreamPrefix + "ABCDEF", Status: "running"},
		{ID: eventlog.A2APushStreamPrefix + "t-1", Status: "running"},
		{ID: eventlog.UISignInStreamPrefix + "x", Status: "running"},
		{ID: eventlog.BusStreamPrefix + "y", Status: "running"},
	}
	node.MarkStreams(infos)
	want := []string{"running", node.MCPSessionStatus, a2a.PushStatus, node.SignInStatus, node.BusStatus}
	for i, w := range want {
		if infos[i].Status != w {
			t.Errorf("%s is listed as %q, want %q", infos[i].ID, infos[i].Status, w)
		}
	}
}
