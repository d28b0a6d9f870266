package a2a

import (
	"context"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

// A message sent again to a session that recorded its task under the legacy
// envelope ID (the messageId's alone) is that task, read from the session's
// events where the backend finds no event by its ID; the same messageId in
// another session, or a new one, is a task to claim.
func TestDedupeFindsATaskRecordedUnderItsLegacyEnvelopeID(t *testing.T) {
	ctx := context.Background()
	l, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	e, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	e.SessionID, e.Seq, e.TS, e.ID = "old", 1, time.Now().UnixMicro(), legacyEnvelopeID("1")
	e.CausationID, e.CorrelationID = MessageCause("1"), e.ID
	if err := l.Append(ctx, []messages.Envelope{e}); err != nil {
		t.Fatal(err)
	}
	b := &logBackend{log: l}
	d := NewDedupe(nil, NewExecutor(b, "default"), NewTaskStore(b))
	for _, c := range []struct {
		session, message string
		seen             bool
	}{{"old", "1", true}, {"other", "1", false}, {"old", "2", false}} {
		msg := sdk.NewMessage(sdk.MessageRoleUser, sdk.TextPart{Text: "hi"})
		msg.ID, msg.ContextID = c.message, c.session
		id, seen, err := d.prepare(ctx, &sdk.MessageSendParams{Message: msg})
		if err != nil {
			t.Fatal(err)
		}
		want := sdk.TaskID("")
		if c.seen {
			want = sdk.TaskID("old~" + e.ID[len("a2a-"):])
		}
		if seen != c.seen || id != want {
			t.Errorf("message %s in %s: %q, seen %v; want %q, seen %v", c.message, c.session, id, seen, want, c.seen)
		}
	}
}
