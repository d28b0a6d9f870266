package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// The write after task of a session whose namespace is another node's rides out
// the owner's embedder being down, as a local one does: the owner answers that its
// failure is transient, and the session's node tries it again under its key.
// Before, the owner's error came back as plain text, and the turn was never
// remembered.
func TestWriteAfterTaskRetriesATransientFailureAtTheNamespaceOwner(t *testing.T) {
	k := newKafkaEnv(t)
	group := uniqueGroup(t)
	shared := sharedLog(t)
	const namespace = "agent:a"
	withMemory := func(c *node.Config) {
		c.Log = shared
		c.Model = script(t, llm.ScriptStep{Content: "Noted."})
		emb := &downEmbedder{}
		emb.failures.Store(2)
		c.Memory = &memory.Config{Embedder: emb}
		c.MemoryTool = &memory.ToolConfig{Namespace: namespace}
		c.MemoryWriteAfterTask = true
	}
	a := startMemoryClusterNode(t, k, group, shared, "a", withMemory)
	b := startMemoryClusterNode(t, k, group, shared, "b", withMemory)
	waitPartitionsSplit(t, a.n, b.n)
	other := b
	if !a.parts.owns(kafka.PartitionOf(memory.Stream(namespace), memoryClusterPartitions)) {
		other = a
	}
	session := sessionsOn(t, other, "remember", 1)[0]
	if _, err := other.n.Submit(context.Background(), node.Task{Input: "I live in Oslo and I like tea.", SessionID: session}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the task is remembered once the owner's embedder is back", func() bool {
		return streamLen(t, shared, memory.Stream(namespace)) > 0
	})
}

// A turn waiting to be remembered when its session's node stops (the namespace
// owner's embedder down) is remembered by the node that takes the session's
// partition over, once the embedder is back: the pending writes are derived from
// the log as a partition is assigned, not kept in the stopped node's memory.
func TestWriteAfterTaskPendingOnAStoppedNodeIsRememberedByTheNextOwner(t *testing.T) {
	k := newKafkaEnv(t)
	group := uniqueGroup(t)
	shared := sharedLog(t)
	const namespace = "agent:a"
	embA, embB := &switchEmbedder{down: true}, &switchEmbedder{down: true}
	withMemory := func(emb *switchEmbedder) func(c *node.Config) {
		return func(c *node.Config) {
			c.Log = shared
			c.Model = script(t, llm.ScriptStep{Content: "Noted."})
			c.Memory = &memory.Config{Embedder: emb}
			c.MemoryTool = &memory.ToolConfig{Namespace: namespace}
			c.MemoryWriteAfterTask = true
		}
	}
	a := startMemoryClusterNode(t, k, group, shared, "a", withMemory(embA))
	b := startMemoryClusterNode(t, k, group, shared, "b", withMemory(embB))
	waitPartitionsSplit(t, a.n, b.n)
	session := sessionsOn(t, a, "pending", 1)[0]
	if _, err := a.n.Submit(context.Background(), node.Task{Input: "I live in Oslo and I like tea.", SessionID: session}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the task completes", func() bool {
		infos, err := shared.Sessions(context.Background(), eventlog.Filter{Status: messages.StatusCompleted, SessionsOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range infos {
			if s.ID == session {
				return true
			}
		}
		return false
	})
	a.stop() // its write after task gives up as it closes: nothing remembered yet
	if got := streamLen(t, shared, memory.Stream(namespace)); got != 0 {
		t.Fatalf("the namespace's stream holds %d events while the embedders were down", got)
	}
	embB.mu.Lock()
	embB.down = false
	embB.mu.Unlock()
	waitFor(t, 60*time.Second, "the next owner remembers the turn", func() bool {
		return streamLen(t, shared, memory.Stream(namespace)) > 0
	})
	checkOnce(t, shared, rememberedFrom(t, b.n, "Oslo", session))
}
