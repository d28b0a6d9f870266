package node_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A malformed message on the tasks topic goes to the poison topic with its reason and
// does not block the messages behind it; a redelivered message is handled once.
func TestBadBusMessagesArePoisonedAndDuplicatesSkipped(t *testing.T) {
	n := nodetest.Start(t, node.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	poisoned, err := n.Bus().Subscribe(ctx, node.TopicPoison)
	if err != nil {
		t.Fatal(err)
	}
	bad := message.NewMessage("bad-1", []byte(`{"id": "x", "session_id": `))
	// The embedded bus hands the poisoned copy over synchronously: publish in the
	// background while this test reads the poison topic.
	go func() {
		if err := n.Bus().Publish(messages.TopicTasks, bad); err != nil {
			t.Error(err)
		}
	}()
	select {
	case p := <-poisoned:
		p.Ack()
		if p.UUID != "bad-1" || !strings.Contains(p.Metadata.Get(middleware.ReasonForPoisonedKey), "malformed JSON") {
			t.Fatalf("poisoned %s: %q", p.UUID, p.Metadata.Get(middleware.ReasonForPoisonedKey))
		}
	case <-ctx.Done():
		t.Fatal("the malformed task never reached the poison topic")
	}
	// The next task goes through (to its end, so that the session no longer changes on
	// its own), and a redelivery of it is skipped.
	id := "after-poison"
	nodetest.Run(t, n, id, "echo fine")
	events := nodetest.Run(t, n, "after-poison-2", "echo two")
	if len(events) == 0 {
		t.Fatal("no events")
	}
	first, _ := n.Log().Read(ctx, id, 1)
	dup := message.NewMessage(first[0].ID, mustEnvelope(t, first[0]))
	if err := n.Bus().Publish(messages.TopicTasks, dup); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(n.Handler())
	defer srv.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get(srv.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body := string(b)
		if strings.Contains(body, `troupe_bus_poisoned_total{handler="tasks"} 1`) &&
			strings.Contains(body, `troupe_bus_duplicates_total{handler="tasks"} 1`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics:\n%s", body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	after, _ := n.Log().Read(ctx, id, 1)
	if len(after) != len(first) {
		t.Fatalf("a duplicate changed the session: %d events, had %d", len(after), len(first))
	}
}

func mustEnvelope(t *testing.T, e messages.Envelope) []byte {
	t.Helper()
	b, err := messages.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
