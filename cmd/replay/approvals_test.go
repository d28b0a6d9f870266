package main

import (
	"fmt"
	"testing"

	"github.com/troupe-run/troupe/messages"
)

// A fork re-derives the keys of approval events with the calls' keys, so that the
// forked session's approvals name its own calls.
func TestForkRekeysApprovals(t *testing.T) {
	var parent []messages.Envelope
	for _, p := range []messages.Payload{
		&messages.TaskSubmitted{Input: "mail bob"},
		&messages.ToolCallRequested{Key: "p/2", CallID: "c1", Tool: "send_email", Arguments: "{}"},
		&messages.ApprovalRequested{Key: "p/2", CallID: "c1", Tool: "send_email", Arguments: "{}"},
		&messages.ApprovalResolved{Key: "p/2", Approve: true, By: messages.ApprovedByHTTP},
	} {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		seq := uint64(len(parent) + 1)
		e.ID, e.SessionID, e.Seq, e.TS, e.Actor = fmt.Sprintf("p/%d", seq), "p", seq, int64(seq), "session"
		parent = append(parent, e)
	}
	out, err := forkEvents(parent, 4, "f", 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range out[2:4] {
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		key := ""
		switch p := p.(type) {
		case *messages.ApprovalRequested:
			key = p.Key
		case *messages.ApprovalResolved:
			key = p.Key
		}
		if key != "f/2" {
			t.Errorf("forked %s keyed %q, want f/2", e.Type, key)
		}
	}
}
