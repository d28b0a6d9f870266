package node

import (
	"context"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// servedEffects counts the effects a node performs for other nodes' sessions
// (handleEffect) from the moment it takes their requests on until it published
// their replies, so that Close lets them answer before it stops their handlers:
// stopping a handler gives its partitions up, and a request whose reply was not
// published yet would be performed again by the next node to read it.
type servedEffects struct {
	mu      sync.Mutex
	out     int
	closing bool
	idle    chan struct{} // closed once closing with none out
}

// start counts one more effect served; false once close began: the request is
// not taken on.
func (s *servedEffects) start() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.out++
	return true
}

// done counts one effect served less.
func (s *servedEffects) done() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.out--
	if s.closing && s.out == 0 {
		close(s.idle)
	}
}

// close takes no more effects on and waits up to within for those out to be done.
// It reports how many were still out then. It is called once.
func (s *servedEffects) close(within time.Duration) int {
	s.mu.Lock()
	s.closing = true
	s.idle = make(chan struct{})
	if s.out == 0 {
		close(s.idle)
	}
	idle := s.idle
	s.mu.Unlock()
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case <-idle:
		return 0
	case <-t.C:
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.out
	}
}

// inFlightHolder is a consumer-group subscriber that can keep the messages its
// handler holds through a rebalance (kafka.Subscriber.HoldInFlight): a member giving
// up a partition waits up to d for them to be settled instead of leaving them to
// the partition's next owner.
type inFlightHolder interface{ HoldInFlight(d time.Duration) }

// holdServedCalls tells the subscribers of the tool and model requests this node
// serves (Bus.Tools, Bus.Models) how long a request may be in hand: up to the
// longest call timeout the node enforces for its kind (ToolTimeout and each tool's
// own, ModelTimeout), when LocalEffects answers the call with a timeout, plus
// HandoffGrace to publish (or store) the reply. A member of the tools group that
// gave a partition up halfway through the rebalance timeout (15 s of a node's
// 30 s) left a longer call's request unacked while it ran, and the partition's
// next owner performed it again. The session groups are left as they are: their
// handover (Revoked) is bounded on its own. Delegate calls are left out: they are
// performed where their session runs (delegatesHere), never asked over the bus.
func (n *Node) holdServedCalls(reg *tools.Registry) {
	w := n.wiring()
	hold := func(sub message.Subscriber, longest time.Duration) {
		if h, ok := sub.(inFlightHolder); ok {
			h.HoldInFlight(longest + n.cfg.HandoffGrace)
		}
	}
	if w.servesTools() {
		longest := n.cfg.ToolTimeout
		consider := func(name string, t tools.Tool) {
			if name != DelegateTool {
				longest = max(longest, tools.LimitsOf(t).Timeout)
			}
		}
		for _, name := range reg.Names() {
			t, _ := reg.Get(name)
			consider(name, t)
		}
		for _, t := range actors.CatalogTools(n.cfg.ToolCatalog) {
			consider(t.Spec().Name, t)
		}
		hold(n.cfg.Bus.Tools, longest)
	}
	if w.servesModels() {
		hold(n.cfg.Bus.Models, n.cfg.ModelTimeout)
	}
}

// messageHandoff is a consumer-group subscriber that tells when this member began
// to give up the partition a delivered message was read from
// (kafka.Subscriber.MessageHandoff): a rebalance, while the messages held are
// still this member's.
type messageHandoff interface {
	MessageHandoff(msg *message.Message) (handoff context.Context, ok bool)
}

// servedHandoff is the context under which the node may start the call of req,
// a request it serves read in msg (LocalEffects.PerformWhile): it ends once the
// node begins to give up msg's partition, or else with msg. A call still queued
// then (past its tool's or the model's concurrency bound, while up to
// kafka.NodeEffectsInFlight requests of a partition are in hand) has not started
// its timeout, and holdServedCalls does not count it: started later during the
// rebalance, it could outlast the hold, and the partition's next owner would
// perform it too.
func (n *Node) servedHandoff(msg *message.Message, req messages.EffectRequest) context.Context {
	if n.cfg.Bus == nil {
		return msg.Context()
	}
	sub := n.cfg.Bus.Tools
	if req.Model != nil {
		sub = n.cfg.Bus.Models
	}
	if h, ok := sub.(messageHandoff); ok {
		if ctx, ok := h.MessageHandoff(msg); ok {
			return ctx
		}
	}
	return msg.Context()
}
