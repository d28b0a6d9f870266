package node_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// TestIdempotencyKeyHoldsAcrossARestart: an Idempotency-Key is kept in the
// events of the writes it made, and a node started again finds it there. A key
// of bytes that are not UTF-8 (an HTTP header may carry any byte from 0x80:
// "café" sent in Latin-1) was stored with U+FFFD in their place, so after a
// restart the same key was a new one: a memory write under it with other
// memories was written, not answered 422, and so was a knowledge base's document. A key must be refused (400, naming the
// header) or hold after a restart.
func TestIdempotencyKeyHoldsAcrossARestart(t *testing.T) {
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lg.Close() })
	data := t.TempDir()
	start := func() (memoryNode, func()) {
		mn := memoryNode{log: newCountingLog(lg), emb: &countingEmbedder{}}
		n, stop := nodetest.StartWithStop(t, node.Config{Log: mn.log, DataDir: data, Memory: &memory.Config{Embedder: mn.emb},
			Knowledge: &knowledge.Config{}})
		mn.n = n
		return mn, stop
	}
	obj := func(content string) string {
		return `{"namespace":"user:alice","tier":"semantic","content":"` + content + `"}`
	}
	for i, key := range []string{"caf\xe9-1", "req-\xff\xfe", "plain-key-7"} {
		mn, stop := start()
		code, _, msg := mn.post(t, obj("first write "+string(rune('a'+i))), "Idempotency-Key", key)
		stop()
		if code == http.StatusBadRequest && strings.Contains(msg, "Idempotency-Key") {
			continue // refused, naming the header: nothing to hold
		}
		if code != http.StatusCreated {
			t.Fatalf("key %q: %d %s", key, code, msg)
		}
		mn, stop = start()
		code, ids, msg := mn.post(t, obj("another write "+string(rune('a'+i))), "Idempotency-Key", key)
		stop()
		if code != http.StatusUnprocessableEntity {
			t.Errorf("key %q after a restart, with other memories: %d %v %q, want 422: the key was used", key, code, ids, msg)
		}
	}
	for i, key := range []string{"caf\xe9-2", "doc-\xff\xfe", "plain-key-8"} {
		mn, stop := start()
		code, b := kbNode{n: mn.n, log: lg}.upload(t, "docs", "first.md", "# First\n\nThe first document "+string(rune('a'+i)), "Idempotency-Key", key)
		stop()
		if code == http.StatusBadRequest && strings.Contains(string(b), "Idempotency-Key") {
			continue
		}
		if code != http.StatusCreated {
			t.Fatalf("key %q: %d %s", key, code, b)
		}
		mn, stop = start()
		code, b = kbNode{n: mn.n, log: lg}.upload(t, "docs", "second.md", "# Second\n\nAnother document "+string(rune('a'+i)), "Idempotency-Key", key)
		stop()
		if code != http.StatusUnprocessableEntity {
			t.Errorf("key %q after a restart, with another document: %d %s, want 422: the key was used", key, code, b)
		}
	}
}
