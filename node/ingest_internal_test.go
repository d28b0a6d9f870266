package node

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/troupe-run/troupe/messages"
)

// TestSessionOrderHandsOverOneSessionAtATime puts a sessionOrder in front of a
// GoChannel that delivers messages as fast as they come (no waiting for acks, as
// Kafka with many in flight) and handles what it hands over as a Watermill Router
// does, each message on a goroutine of its own, here taking a random while and
// failing some messages once. Every session's messages must be handled one at a
// time, in the order the bus delivered them, a failed one again before the next;
// different sessions' messages at once; every bus message acked.
func TestSessionOrderHandsOverOneSessionAtATime(t *testing.T) {
	for _, ackOnArrival := range []bool{false, true} {
		t.Run(fmt.Sprintf("ackOnArrival=%v", ackOnArrival), func(t *testing.T) {
			bus := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 4096}, watermill.NopLogger{})
			t.Cleanup(func() { _ = bus.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			// Bus messages, by ID, to check that each was acked.
			var busMu sync.Mutex
			busMsgs := map[string]*message.Message{}
			delivered := map[string][]int{}
			spy := spySubscriber{Subscriber: bus, seen: func(m *message.Message) {
				n, _ := strconv.Atoi(string(m.Payload))
				busMu.Lock()
				busMsgs[m.UUID] = m
				sid := m.Metadata.Get(messages.MetaSessionID)
				delivered[sid] = append(delivered[sid], n)
				busMu.Unlock()
			}}
			o := &sessionOrder{sub: spy, ackOnArrival: ackOnArrival}
			ch, err := o.Subscribe(ctx, "tasks")
			if err != nil {
				t.Fatal(err)
			}
			const sessions, perSession = 6, 60
			var (
				mu             sync.Mutex
				handled        = map[string][]int{}
				busy           = map[string]bool{}
				failed         = map[string]bool{}
				inHand, maxIn  int
				overlapSession string
				done           = make(chan struct{})
				total          int
			)
			go func() {
				for msg := range ch {
					go func() {
						sid := msg.Metadata.Get(messages.MetaSessionID)
						n, _ := strconv.Atoi(string(msg.Payload))
						mu.Lock()
						if busy[sid] {
							overlapSession = sid
						}
						busy[sid] = true
						inHand++
						maxIn = max(maxIn, inHand)
						mu.Unlock()
						time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
						mu.Lock()
						busy[sid] = false
						inHand--
						fail := n%17 == 3 && !failed[msg.UUID]
						if fail {
							failed[msg.UUID] = true
						} else {
							handled[sid] = append(handled[sid], n)
							total++
							if total == sessions*perSession {
								close(done)
							}
						}
						mu.Unlock()
						if fail {
							msg.Nack()
						} else {
							msg.Ack()
						}
					}()
				}
			}()
			for i := range perSession {
				for s := range sessions {
					sid := fmt.Sprintf("s%d", s)
					m := message.NewMessage(fmt.Sprintf("%s-%d", sid, i), []byte(strconv.Itoa(i)))
					m.Metadata.Set(messages.MetaSessionID, sid)
					if err := bus.Publish("tasks", m); err != nil {
						t.Fatal(err)
					}
				}
			}
			select {
			case <-done:
			case <-ctx.Done():
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("%d of %d messages handled", total, sessions*perSession)
			}
			mu.Lock()
			defer mu.Unlock()
			if overlapSession != "" {
				t.Errorf("session %s had two messages in hand at once", overlapSession)
			}
			if maxIn < 2 {
				t.Errorf("at most %d message in hand at once: sessions were not handled concurrently", maxIn)
			}
			busMu.Lock()
			defer busMu.Unlock()
			for s := range sessions {
				sid := fmt.Sprintf("s%d", s)
				if fmt.Sprint(handled[sid]) != fmt.Sprint(delivered[sid]) {
					t.Fatalf("session %s: handled %v, delivered %v", sid, handled[sid], delivered[sid])
				}
			}
			for id, m := range busMsgs {
				select {
				case <-m.Acked():
				case <-time.After(10 * time.Second):
					t.Fatalf("bus message %s was not acked", id)
				}
			}
		})
	}
}

// spySubscriber shows a test the messages a Subscriber delivers.
type spySubscriber struct {
	message.Subscriber
	seen func(*message.Message)
}

func (s spySubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	in, err := s.Subscriber.Subscribe(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := make(chan *message.Message)
	go func() {
		defer close(out)
		for m := range in {
			s.seen(m)
			out <- m
		}
	}()
	return out, nil
}

// A notes stream's memory commands queued together are handed over together; a
// knowledge base's (whose upload parts must arrive in order) and a memory
// namespace's, one at a time, as a session's tasks are.
func TestSessionOrderHandsANotesStreamsCommandsOverTogether(t *testing.T) {
	// A notes stream's and a memory namespace's commands are grouped by their
	// stream (entity.Batch); a knowledge base's upload parts must arrive in order.
	for stream, together := range map[string]bool{"notes/noter": true, "kb/docs": false, "memory/user:1": true} {
		t.Run(stream, func(t *testing.T) {
			bus := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 64}, watermill.NopLogger{})
			t.Cleanup(func() { _ = bus.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			o := &sessionOrder{sub: bus}
			ch, err := o.Subscribe(ctx, "tasks")
			if err != nil {
				t.Fatal(err)
			}
			const n = 5
			for i := range n {
				m := message.NewMessage(fmt.Sprintf("c%d", i), []byte(`{}`))
				m.Metadata.Set(messages.MetaSessionID, stream)
				m.Metadata.Set(messages.MetaType, messages.TypeMemoryCommand)
				if err := bus.Publish("tasks", m); err != nil {
					t.Fatal(err)
				}
			}
			// Nothing is acked: what the order hands over now is all it hands over
			// before an ack.
			var got []*message.Message
			want := 1
			if together {
				want = n
			}
			for len(got) < want {
				select {
				case m := <-ch:
					got = append(got, m)
				case <-ctx.Done():
					t.Fatalf("%d of %d handed over", len(got), want)
				}
			}
			select {
			case m := <-ch:
				t.Fatalf("%s handed over before %s was acked", m.UUID, got[0].UUID)
			case <-time.After(200 * time.Millisecond):
			}
			for _, m := range got {
				m.Ack()
			}
		})
	}
}

// TestSessionOrderEndsHandedOverContextsWithItsOwn: the context of a message a
// handler holds ends when the subscription's context does (as a Router's handler
// learns that its subscription stopped), and, once the message is settled, ends
// too; a message still waiting for its session's turn is never handed over.
func TestSessionOrderEndsHandedOverContextsWithItsOwn(t *testing.T) {
	for _, ackOnArrival := range []bool{false, true} {
		t.Run(fmt.Sprintf("ackOnArrival=%v", ackOnArrival), func(t *testing.T) {
			bus := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 16}, watermill.NopLogger{})
			t.Cleanup(func() { _ = bus.Close() })
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			o := &sessionOrder{sub: bus, ackOnArrival: ackOnArrival}
			ch, err := o.Subscribe(ctx, "tasks")
			if err != nil {
				t.Fatal(err)
			}
			for i, sid := range []string{"s1", "s2", "s1"} {
				m := message.NewMessage(fmt.Sprintf("m%d", i), []byte(strconv.Itoa(i)))
				m.Metadata.Set(messages.MetaSessionID, sid)
				if err := bus.Publish("tasks", m); err != nil {
					t.Fatal(err)
				}
			}
			deadline := time.After(10 * time.Second)
			var got []*message.Message
			for len(got) < 2 {
				select {
				case m := <-ch:
					got = append(got, m)
				case <-deadline:
					t.Fatalf("%d messages handed over, want 2", len(got))
				}
			}
			// The first one settled: its context ends, and its session's next one comes.
			got[0].Ack()
			select {
			case <-got[0].Context().Done():
			case <-deadline:
				t.Fatal("an acked message's context did not end")
			}
			select {
			case m := <-ch:
				got = append(got, m)
			case <-deadline:
				t.Fatal("the session's next message was not handed over")
			}
			for _, m := range got[1:] {
				if err := m.Context().Err(); err != nil {
					t.Fatalf("message %s: context ended while in hand: %v", m.UUID, err)
				}
			}
			cancel()
			for _, m := range got[1:] {
				select {
				case <-m.Context().Done():
				case <-deadline:
					t.Fatalf("message %s: its context did not end with the subscription's", m.UUID)
				}
			}
		})
	}
}
