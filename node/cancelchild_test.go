package node_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// heldTasks is a node's tasks subscriber that holds the messages of some sessions
// back, in their order, until the test releases them: their owner has not reached
// them yet (busy, lagging), while the messages of other sessions go through.
type heldTasks struct {
	*kafka.Subscriber
	release chan struct{}

	mu       sync.Mutex
	sessions map[string]bool
	seen     map[string][]string // by session: the types of the messages held
}

func newHeldTasks(t *testing.T) *heldTasks {
	h := &heldTasks{release: make(chan struct{}), sessions: map[string]bool{}, seen: map[string][]string{}}
	t.Cleanup(h.open)
	return h
}

// hold holds the sessions' messages from now until open.
func (h *heldTasks) hold(sessions ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range sessions {
		h.sessions[s] = true
	}
}

func (h *heldTasks) open() {
	select {
	case <-h.release:
	default:
		close(h.release)
	}
}

// held reports whether a message of session of type typ is held.
func (h *heldTasks) held(session string, typ messages.Type) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.seen[session] {
		if s == string(typ) {
			return true
		}
	}
	return false
}

func (h *heldTasks) wrap(s *kafka.Subscriber) message.Subscriber {
	h.Subscriber = s
	return h
}

func (h *heldTasks) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	in, err := h.Subscriber.Subscribe(ctx, topic)
	if err != nil || topic != messages.TopicTasks {
		return in, err
	}
	out := make(chan *message.Message)
	go func() {
		defer close(out)
		send := func(m *message.Message) bool {
			select {
			case out <- m:
				return true
			case <-ctx.Done():
				return false
			}
		}
		var queue []*message.Message
		release := h.release
		for {
			select {
			case m, ok := <-in:
				if !ok {
					return
				}
				session := m.Metadata.Get(messages.MetaSessionID)
				h.mu.Lock()
				holds := release != nil && h.sessions[session]
				if holds {
					h.seen[session] = append(h.seen[session], m.Metadata.Get(messages.MetaType))
				}
				h.mu.Unlock()
				if holds {
					queue = append(queue, m)
				} else if !send(m) {
					return
				}
			case <-release:
				for _, m := range queue {
					if !send(m) {
						return
					}
				}
				queue, release = nil, nil
			}
		}
	}()
	return out, nil
}

// A team's task cancelled just after its delegate calls published their children's
// tasks, before the children's owner recorded them: the children are cancelled as
// they start, not left to run for their 30 minutes. (The cancellation was dropped
// as "no running task" when the child's log recorded nothing yet.)
func TestTeamClusterCancelBeforeTheChildrenAreRecorded(t *testing.T) {
	c := newTeamCluster(t, fanOutAgents())
	held := make(chan struct{})
	t.Cleanup(func() { close(held) })
	onB := newByAgent(t, fanOutScripts)
	onB.hold = func(agent string, step int) <-chan struct{} {
		if agent == "slow" || agent == "fast" {
			return held // the children run until cancelled
		}
		return nil
	}
	tasks := newHeldTasks(t)
	a := c.start("a", newByAgent(t, fanOutScripts))
	b := c.startWith("b", 0, onB, nodeWrappers{tasks: tasks.wrap})
	waitOwned(t, a, b)
	session := placed(t, "early", a, b, 2, 3)
	children := []string{node.ChildSessionID(messages.EffectKey{SessionID: session, Seq: 2}),
		node.ChildSessionID(messages.EffectKey{SessionID: session, Seq: 3})}
	tasks.hold(children...)
	if _, err := a.n.Submit(context.Background(), node.Task{Input: "tally", SessionID: session, Agent: "panel"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "both children's tasks held on b", func() bool {
		return tasks.held(children[0], messages.TypeTaskSubmitted) && tasks.held(children[1], messages.TypeTaskSubmitted)
	})
	if err := a.n.Cancel(context.Background(), session, "the user changed their mind"); err != nil {
		t.Fatal(err)
	}
	// Both children's cancellations follow their tasks on their partitions; then b
	// reads them, in their order.
	waitFor(t, 30*time.Second, "both children's cancellations after their tasks on b", func() bool {
		return tasks.held(children[0], messages.TypeCancelRequested) && tasks.held(children[1], messages.TypeCancelRequested)
	})
	tasks.open()
	checkTeamCancelled(t, c, session, 30*time.Second)
}
