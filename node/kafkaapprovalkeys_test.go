package node_test

import (
	"errors"
	"testing"

	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A task.approval message on troupe.tasks whose "approve" is given twice or
// miscased is refused (poisoned), as the HTTP answer now is: encoding/json takes
// the last key case-insensitively, so a kcat message {"approve":false,
// "Approve":true} approved the call. A field it does not know is let through.
func TestKafkaApprovalWithDuplicateOrMiscasedKeysIsRefused(t *testing.T) {
	n := nodetest.Start(t, node.Config{})
	for _, body := range []string{
		`{"session_id":"s-1","call":"call_1","approve":false,"Approve":true}`,
		`{"session_id":"s-1","call":"call_1","approve":false,"approve":true}`,
		`{"session_id":"s-1","call":"call_1","APPROVE":true}`,
	} {
		a, err := n.Ingress().DecodeApproval(node.Arrival{Source: node.SourceBus, Payload: []byte(body)})
		if !errors.Is(err, node.ErrBadTask) {
			t.Errorf("%s: decoded as %+v (%v), want ErrBadTask", body, a, err)
		}
	}
	// A field of a later version is let through, as before.
	for _, body := range []string{
		`{"session_id":"s-1","call":"call_1","approve":true}`,
		`{"v":1,"session_id":"s-1","call":"call_1","approve":false,"reason":"no","by":"kafka","later":1}`,
	} {
		if _, err := n.Ingress().DecodeApproval(node.Arrival{Source: node.SourceBus, Payload: []byte(body)}); err != nil {
			t.Errorf("%s: %v", body, err)
		}
	}
}
