package node_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A team member whose answer shares two thousand facts (STATE lines) makes the
// team record as many team.state_updated events in one batch: more than a
// watcher's backlog, so a plain Watch falls behind and closes, and node run
// stopped with "lost the live event feed", leaving the task running. A
// WatchResuming feed reads what it missed from the log and watches again: its
// reader sees every event once, in seq order, up to the task's end.
func TestWatchResumingCatchesUpABurstOfTeamState(t *testing.T) {
	var facts []string
	for i := range 2000 {
		facts = append(facts, fmt.Sprintf("STATE: k%d = v%d", i, i))
	}
	model := newByAgent(t, map[string][]llm.ScriptStep{"writer": {{Content: "42\n" + strings.Join(facts, "\n")}}})
	cfg := node.Config{Model: model, Agents: []node.NamedAgent{
		{Name: "writer", SystemPrompt: "You write."},
		{Name: "line", Team: &actors.Team{Pattern: actors.TeamPipeline, Members: []actors.TeamMember{{Name: "writer"}}}}}}
	n := nodetest.Start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	const id = "line-burst"
	plain, stopPlain := n.Watch(id)
	defer stopPlain()
	live, stop, _ := n.WatchResuming(ctx, id, false, 0)
	defer stop()
	if _, err := n.Submit(ctx, node.Task{Input: "Share the facts.", SessionID: id, Agent: "line"}); err != nil {
		t.Fatal(err)
	}
	var last uint64
	for done := false; !done; {
		select {
		case e, ok := <-live:
			if !ok {
				t.Fatalf("the feed closed after seq %d, before the task's end", last)
			}
			if e.Seq != last+1 {
				t.Fatalf("event seq %d (%s) after %d: want every event once, in order", e.Seq, e.Type, last)
			}
			last = e.Seq
			done = e.Type == messages.TypeTaskCompleted || e.Type == messages.TypeTaskFailed
			if e.Type == messages.TypeTaskFailed {
				t.Fatalf("the task failed: %s", e.Payload)
			}
		case <-ctx.Done():
			t.Fatalf("no task end after seq %d", last)
		}
	}
	all := readAll(t, n.Log(), id)
	if want := all[len(all)-1].Seq; last != want || last < 2000 {
		t.Fatalf("read up to seq %d; the log holds %d", last, want)
	}
	// The burst is past a plain watcher's backlog: its feed fell behind and closed
	// (else this test would not see a fall behind).
	for {
		select {
		case _, ok := <-plain:
			if !ok {
				return
			}
		case <-ctx.Done():
			t.Fatal("a plain Watch kept up with the burst: the test shows nothing")
		}
	}
}

// catchUpFails is a log whose reads of one session past its first event fail: a
// WatchResuming feed's catch-up read, not the session's own reads from seq 1.
type catchUpFails struct {
	eventlog.Log
	session string
	err     error
}

func (l *catchUpFails) Read(ctx context.Context, session string, from uint64) ([]messages.Envelope, error) {
	if session == l.session && from > 1 {
		return nil, l.err
	}
	return l.Log.Read(ctx, session, from)
}

// When a WatchResuming feed falls behind and the log cannot be read to catch it
// up, its channel closes, and node run and replay fork said only "lost the live
// event feed": lost now says why, with the log's error, while a feed its reader
// cancelled was lost for no reason.
func TestWatchResumingSaysWhyItLostTheFeed(t *testing.T) {
	var facts []string
	for i := range 2000 {
		facts = append(facts, fmt.Sprintf("STATE: k%d = v%d", i, i))
	}
	const id = "line-unread"
	readErr := errors.New("disk I/O error")
	log := &catchUpFails{Log: sharedLog(t), session: id, err: readErr}
	model := newByAgent(t, map[string][]llm.ScriptStep{"writer": {{Content: "42\n" + strings.Join(facts, "\n")}}})
	n := nodetest.Start(t, node.Config{Log: log, Model: model, Agents: []node.NamedAgent{
		{Name: "writer", SystemPrompt: "You write."},
		{Name: "line", Team: &actors.Team{Pattern: actors.TeamPipeline, Members: []actors.TeamMember{{Name: "writer"}}}}}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	live, stop, lost := n.WatchResuming(ctx, id, false, 0)
	defer stop()
	other, stopOther, otherLost := n.WatchResuming(ctx, "line-other", false, 0)
	if _, err := n.Submit(ctx, node.Task{Input: "Share the facts.", SessionID: id, Agent: "line"}); err != nil {
		t.Fatal(err)
	}
	code, err := node.Follow(ctx, io.Discard, live, 1)
	if !errors.Is(err, node.ErrLostFeed) || code != 1 {
		t.Fatalf("Follow: %d %v, want the feed lost (the catch-up cannot read the log)", code, err)
	}
	if why := lost(); !errors.Is(why, readErr) {
		t.Fatalf("lost: %v, want the log's error", why)
	}
	stopOther()
	for range other { // drain it until it closes
	}
	if why := otherLost(); why != nil {
		t.Fatalf("a feed its reader cancelled: lost %v, want nil", why)
	}
}
