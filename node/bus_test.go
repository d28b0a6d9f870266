package node_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// The embedded bus must keep each session's messages in the order they were
// published, even with many sessions publishing at once and with redeliveries.
func TestEmbeddedBusKeepsPerSessionOrderAcrossNacks(t *testing.T) {
	bus := node.NewEmbeddedBus(watermill.NopLogger{})
	t.Cleanup(func() { _ = bus.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub, err := bus.Subscribe(ctx, "topic")
	if err != nil {
		t.Fatal(err)
	}
	const sessions, perSession = 8, 200
	got := map[string][]int{}
	nacked := map[string]bool{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		total := 0
		for msg := range sub {
			sid := msg.Metadata.Get(messages.MetaSessionID)
			n, _ := strconv.Atoi(string(msg.Payload))
			// Nack every 50th message once: it must come back before the next one.
			if key := msg.UUID; n%50 == 0 && !nacked[key] {
				nacked[key] = true
				msg.Nack()
				continue
			}
			got[sid] = append(got[sid], n)
			msg.Ack()
			if total++; total == sessions*perSession {
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for s := 0; s < sessions; s++ {
		wg.Add(1)
		go func(sid string) {
			defer wg.Done()
			for i := 0; i < perSession; i++ {
				m := message.NewMessage(fmt.Sprintf("%s-%d", sid, i), []byte(strconv.Itoa(i)))
				m.Metadata.Set(messages.MetaSessionID, sid)
				if err := bus.Publish("topic", m); err != nil {
					t.Error(err)
					return
				}
			}
		}(fmt.Sprintf("s%d", s))
	}
	wg.Wait()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("not every message arrived")
	}
	for sid, seq := range got {
		for i, n := range seq {
			if n != i {
				t.Fatalf("session %s: message %d arrived at position %d", sid, n, i)
			}
		}
	}
	if len(got) != sessions {
		t.Fatalf("%d sessions arrived", len(got))
	}
}
