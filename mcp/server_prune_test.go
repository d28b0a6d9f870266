package mcp_test

import (
	"context"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/messages"
)

// The streams of the sessions that ended are pruned from the log, those of the
// live ones are kept, across a restart too: a live session keeps its log level
// and subscriptions.
func TestServerHTTPPrunesEndedSessions(t *testing.T) {
	const timeout = 2 * time.Second
	r := newRestartable(t, mcp.ServerOptions{SessionTimeout: timeout, ReconnectDelay: 100 * time.Millisecond,
		Sources: []mcp.Source{notesCatalog()}}, answerScript(t, "unused"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := func() {
		rctx, stop := context.WithCancel(ctx)
		t.Cleanup(stop)
		go r.srv.Run(rctx)
	}
	run()
	stream := func(cs *sdk.ClientSession) string { return eventlog.MCPSessionStreamPrefix + cs.ID() }
	events := func(id string) []messages.Envelope {
		t.Helper()
		got, err := r.n.Log().Read(ctx, id, 1)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	ended := func() string {
		t.Helper()
		cs := r.connect(ctx, nil)
		if err := cs.SetLoggingLevel(ctx, &sdk.SetLoggingLevelParams{Level: "info"}); err != nil {
			t.Fatal(err)
		}
		id := stream(cs)
		if len(events(id)) != 1 {
			t.Fatalf("the session's stream holds %d events, want its level", len(events(id)))
		}
		if err := cs.Close(); err != nil {
			t.Fatal(err)
		}
		return id
	}
	awaitGone := func(id string) {
		t.Helper()
		for len(events(id)) > 0 {
			select {
			case <-ctx.Done():
				t.Fatalf("the stream of an ended session, %s, is still there", id)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	live := r.connect(ctx, nil)
	if err := live.SetLoggingLevel(ctx, &sdk.SetLoggingLevelParams{Level: "debug"}); err != nil {
		t.Fatal(err)
	}
	if err := live.Subscribe(ctx, &sdk.SubscribeParams{URI: "notes://a"}); err != nil {
		t.Fatal(err)
	}
	awaitGone(ended()) // older than the live session's events, past the timeout
	wantKept := func(when string) {
		t.Helper()
		got := events(stream(live))
		level, subs := "", 0
		for _, e := range got {
			p, err := e.Decode()
			if err != nil {
				t.Fatal(err)
			}
			switch p := p.(type) {
			case *messages.MCPLevelSet:
				level = p.Level
			case *messages.MCPSubscribed:
				subs++
			}
		}
		if level != "debug" || subs != 1 {
			t.Fatalf("the live session's stream %s: level %q, %d subscriptions (%d events); want debug and 1", when, level, subs, len(got))
		}
	}
	wantKept("after a prune")

	r.restart(answerScript(t, "unused"))
	run()
	if _, err := live.ListTools(ctx, nil); err != nil { // the client's next request resumes its session
		t.Fatal(err)
	}
	awaitGone(ended()) // a prune of the node that serves now
	wantKept("after a restart and a prune")
}
