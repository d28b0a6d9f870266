package node_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// resumeGate holds each Read of a session whose ID starts with prefix until the
// test releases it (until open), and counts the reads held at once.
type resumeGate struct {
	eventlog.Log
	prefix   string
	arrived  chan struct{}
	release  chan struct{}
	mu       sync.Mutex
	open     bool
	inflight int
	max      int
}

func (g *resumeGate) Read(ctx context.Context, id string, from uint64) ([]messages.Envelope, error) {
	g.mu.Lock()
	if g.open || !strings.HasPrefix(id, g.prefix) {
		g.mu.Unlock()
		return g.Log.Read(ctx, id, from)
	}
	g.inflight++
	g.max = max(g.max, g.inflight)
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.inflight--
		g.mu.Unlock()
	}()
	select {
	case g.arrived <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case <-g.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.Log.Read(ctx, id, from)
}

// TestResumeReadsAFewSessionsAtATime: a node that resumes many unfinished
// sessions (at its start, and as a sharded node on Assigned) has at most
// Config.ResumeConcurrency of them read their log at once, so that the log's
// other connections stay free for the rest of the node; every session still
// resumes and finishes its task.
func TestResumeReadsAFewSessionsAtATime(t *testing.T) {
	const sessions, limit = 12, 3
	dir := t.TempDir()
	ctx := context.Background()
	base, err := sqlite.Open(ctx, sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	for i := range sessions {
		e, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: fmt.Sprintf("echo r%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		e.SessionID = fmt.Sprintf("r-%d", i)
		e.ID, e.Seq, e.TS, e.Actor = e.SessionID+"/1", 1, time.Now().UnixMicro(), "ingress"
		e.CorrelationID = e.ID
		if err := base.Append(ctx, []messages.Envelope{e}); err != nil {
			t.Fatal(err)
		}
	}
	g := &resumeGate{Log: base, prefix: "r-", arrived: make(chan struct{}), release: make(chan struct{})}
	nodetest.Start(t, node.Config{DataDir: dir, Log: g, ResumeConcurrency: limit})

	// Once limit reads are held, no other session starts reading (the node resumes
	// the next only when one of these is done): given a second, an unbounded node
	// wakes them all.
	held, deadline := 0, time.After(20*time.Second)
	for ; held < limit; held++ {
		select {
		case <-g.arrived:
		case <-deadline:
			t.Fatalf("%d of %d sessions read their log; the others were not resumed", held, sessions)
		}
	}
	select {
	case <-g.arrived:
		t.Fatalf("a session read its log while %d others were reading theirs; want at most ResumeConcurrency, %d, at once", limit, limit)
	case <-time.After(time.Second):
	}
	// Then release a held read whenever limit are held, and the rest once every
	// session read its log.
	for arrived := held; arrived < sessions; {
		for ; held >= limit; held-- {
			g.release <- struct{}{}
		}
		select {
		case <-g.arrived:
			arrived++
			held++
		case <-deadline:
			t.Fatalf("%d of %d sessions read their log; the others were not resumed", arrived, sessions)
		}
	}
	g.mu.Lock()
	g.open = true
	most := g.max
	g.mu.Unlock()
	for ; held > 0; held-- {
		g.release <- struct{}{}
	}
	if most > limit {
		t.Errorf("%d sessions read their log at once while the node resumed them; want at most ResumeConcurrency, %d", most, limit)
	}
	for i := range sessions {
		id := fmt.Sprintf("r-%d", i)
		waitFor(t, 20*time.Second, "session "+id+" to complete", func() bool {
			infos, err := base.Sessions(ctx, eventlog.Filter{Prefix: id})
			return err == nil && slices.ContainsFunc(infos, func(i eventlog.SessionInfo) bool {
				return i.ID == id && i.Status == messages.StatusCompleted
			})
		})
	}
}
