package node

import (
	"context"
	"net/http"
	"time"
)

// MarkPublishedNow runs one round of publication marks (pubmark.go) at once, as
// the node does every Config.PublishMarkInterval, and reports whether it recorded
// a mark: the hand-over tests mark where they need to, without waiting.
func (n *Node) MarkPublishedNow() bool { return n.markPublished(10 * time.Second) }

// ShortenAnswerWait makes the answers that wait on an embedder or a model
// (awaitAnswer) wait d instead of 10 minutes: a test outlasts it quickly.
func ShortenAnswerWait(c *HTTPConfig, d time.Duration) { c.answerWait = d }

// ShortenMinIdleToClose sets how long a kept-alive connection must be idle
// before it is closed for a client waiting at the connection limit.
func ShortenMinIdleToClose(c *HTTPConfig, d time.Duration) { c.minIdleToClose = d }

// TellConnStates has the HTTP server of c call f with each state a connection
// enters, once the server has recorded it.
func TellConnStates(c *HTTPConfig, f func(http.ConnState)) { c.tracked = f }

// ShortenMemoryWait makes a command to a namespace's owner wait d for its answer
// instead of 30 seconds (memoryTimeout), until the test ends.
func ShortenMemoryWait(t interface{ Cleanup(func()) }, d time.Duration) {
	old := memoryWait
	memoryWait = d
	t.Cleanup(func() { memoryWait = old })
}

// RecoverWriteAfterTask runs the recovery of the write after task of every
// session now (recoverPending), as a partition's assignment does, and returns
// once it is done.
func (n *Node) RecoverWriteAfterTask(ctx context.Context) {
	n.afterTask.recoverPending(ctx, func(string) bool { return true })
}

// LimitConsolidationsAside sets how many consolidations the node runs for commands
// at once (maxConsolidationsAside), before it runs any.
func (n *Node) LimitConsolidationsAside(max int) {
	n.aside.mu.Lock()
	defer n.aside.mu.Unlock()
	n.aside.max = max
}
