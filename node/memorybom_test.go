package node_test

import (
	"testing"

	"github.com/troupe-run/troupe/node"
)

// A body saved by an editor that begins files with a byte order mark (sent with
// curl --data-binary @memories.json) is written, as node memory import takes a
// file that begins with one: before, it was refused as "malformed JSON: invalid
// character 'ï'".
func TestMemoryPostTakesABodyThatBeginsWithAByteOrderMark(t *testing.T) {
	mn := newMemoryNode(t, node.Config{})
	ids := mn.mustPost(t, "\ufeff"+`[{"namespace":"user:alice","tier":"semantic","content":"Alice likes tea"}]`)
	if len(ids) != 1 {
		t.Fatalf("ids %v", ids)
	}
	ids = mn.mustPost(t, "\ufeff\n"+`{"namespace":"user:alice","tier":"semantic","content":"Alice likes green tea"}`)
	if len(ids) != 1 {
		t.Fatalf("ids %v", ids)
	}
}
