package node_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/node"
)

// TestMemoryMetadataWithAKeyGivenTwiceIsRefused: a memory's fields given twice
// are refused, and so is a metadata key given twice (at any depth): encoding/json
// kept the last value and dropped the other unsaid, where another reader of the
// same body (a client's own copy, a proxy's log) takes the first.
func TestMemoryMetadataWithAKeyGivenTwiceIsRefused(t *testing.T) {
	mn := newMemoryNode(t, node.Config{})
	for _, meta := range []string{
		`{"source":"profile-form","source":"chat-42"}`,
		`{"origin":{"app":"crm","app":"chat"}}`,
		`{"list":[{"k":1,"k":2}]}`,
	} {
		code, ids, msg := mn.post(t, `{"namespace":"user:alice","tier":"semantic","content":"Alice lives in Lisbon","metadata":`+meta+`}`)
		if code != http.StatusBadRequest || ids != nil || !strings.Contains(msg, "given twice") {
			t.Errorf("metadata %s: %d %v %q, want 400 saying which key is given twice", meta, code, ids, msg)
		}
	}
	if es := memoryEvents(t, mn.log, "user:alice"); len(es) != 0 {
		t.Fatalf("%d events written by refused requests", len(es))
	}
	// The same key in different objects is no repeat.
	mn.mustPost(t, `{"namespace":"user:alice","tier":"semantic","content":"Alice lives in Porto","metadata":{"source":"form","note":{"a":1,"b":{"a":2}}}}`)
}
