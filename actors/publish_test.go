package actors_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// A session publishes each event it appended on messages.TopicEvents as
// messages.Marshal encodes it, keyed by session, and each payload is a slice of its
// own: appending to one leaves the next one as it was (a batch's events share one
// buffer).
func TestPublishedEventsAreTheLogsEncoding(t *testing.T) {
	bus := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 64}, watermill.NopLogger{})
	t.Cleanup(func() { _ = bus.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	sub, err := bus.Subscribe(ctx, messages.TopicEvents)
	if err != nil {
		t.Fatal(err)
	}
	echo := funcTool{"echo", func(_ context.Context, c tools.Call) (string, error) { return "<" + c.Arguments + "> & more", nil }}
	h := newHarness(t, harnessOpts{tools: []tools.Tool{echo}, model: script(t,
		calls(messages.ToolCall{ID: "1", Name: "echo", Arguments: `{"a":"x"}`}, messages.ToolCall{ID: "2", Name: "echo", Arguments: `{"b":"\u2028"}`}),
		llm.ScriptStep{Content: "done <ok>"}),
		deps: func(d *actors.SessionDeps) { d.Publisher = bus }})
	h.submit("s1", "task-1", "go & see")
	events := h.wait("s1")
	byID := map[string]messages.Envelope{}
	for _, e := range events {
		byID[e.ID] = e
	}
	last := events[len(events)-1]
	timeout := time.After(10 * time.Second)
	for n := 0; ; n++ {
		var m *message.Message
		select {
		case m = <-sub:
			m.Ack()
		case <-timeout:
			t.Fatalf("%s not published in 10 s (%d messages were)", last.ID, n)
		}
		e, ok := byID[m.UUID]
		if !ok || m.Metadata.Get(messages.MetaSessionID) != "s1" {
			t.Fatalf("message %s (session %q) is no event of the log", m.UUID, m.Metadata.Get(messages.MetaSessionID))
		}
		want, err := messages.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(m.Payload, want) {
			t.Fatalf("event %d:\n published %s\n want      %s", e.Seq, m.Payload, want)
		}
		if cap(m.Payload) != len(m.Payload) {
			t.Fatalf("event %d: payload of %d bytes has room for %d: appending to it would write over the next one", e.Seq, len(m.Payload), cap(m.Payload))
		}
		if e.ID == last.ID {
			if n < 5 {
				t.Fatalf("%d events published before the last, want the task's steps", n)
			}
			return
		}
	}
}
