package actors

import (
	"context"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/troupe-run/troupe/messages"
)

// EffectResults makes a node perform each effect once per key: a call for a key being
// performed waits for that performance, and one for a key performed recently gets its
// answer again. Calls are made again when a session moves to another node while its
// effect is in flight (the answer went to the old owner) or restarts, with the same
// key; when the same node serves the call again — over the bus (messages.EffectRequest)
// or for one of its own sessions (CachedEffects) — it answers without calling the tool
// or model a second time. The tool's own idempotency on the key remains the guarantee
// across nodes and restarts; this saves the repeated call.
type EffectResults struct {
	ttl  time.Duration
	max  int
	hits func()

	mu      sync.Mutex
	flights map[string]*effectFlight
	swept   time.Time
}

type effectFlight struct {
	done chan struct{}
	rep  messages.EffectReply
	err  error
	at   time.Time // when it finished; zero while in flight
}

// NewEffectResults keeps answers for ttl, at most max of them; hit is called for each
// call answered from an earlier or concurrent performance (nil: none).
func NewEffectResults(ttl time.Duration, max int, hit func()) *EffectResults {
	if hit == nil {
		hit = func() {}
	}
	return &EffectResults{ttl: ttl, max: max, flights: map[string]*effectFlight{}, hits: hit}
}

// Do returns key's answer: a recent one, the one being computed, or perform's.
// A failed perform is not kept: the next call for the key performs it again.
func (r *EffectResults) Do(ctx context.Context, key string, perform func(context.Context) (messages.EffectReply, error)) (messages.EffectReply, error) {
	now := time.Now()
	r.mu.Lock()
	r.sweep(now)
	if f, ok := r.flights[key]; ok {
		r.mu.Unlock()
		r.hits()
		select {
		case <-f.done:
			if f.err == nil {
				return f.rep, nil
			}
			return r.Do(ctx, key, perform)
		case <-ctx.Done():
			return messages.EffectReply{}, ctx.Err()
		}
	}
	f := &effectFlight{done: make(chan struct{})}
	r.flights[key] = f
	r.mu.Unlock()

	f.rep, f.err = perform(ctx)
	r.mu.Lock()
	if f.err != nil {
		delete(r.flights, key)
	} else {
		f.at = time.Now()
	}
	r.mu.Unlock()
	close(f.done)
	return f.rep, f.err
}

// sweep drops answers older than ttl, and finished ones past max.
func (r *EffectResults) sweep(now time.Time) {
	if len(r.flights) <= r.max && now.Sub(r.swept) < r.ttl/10 {
		return
	}
	r.swept = now
	for k, f := range r.flights {
		if !f.at.IsZero() && (now.Sub(f.at) > r.ttl || len(r.flights) > r.max) {
			delete(r.flights, k)
		}
	}
}

// CachedEffectsConfig configures a CachedEffects actor.
type CachedEffectsConfig struct {
	// Model and Tools are the node's model actor and tool actors.
	Model *actor.PID
	Tools map[string]*actor.PID
	// Results is the node's EffectResults, shared with the serving side of
	// RemoteEffects (PerformEffect).
	Results *EffectResults
	// ToolWait and ModelWait bound how long a call waits for its answer; the tool and
	// model actors time calls out before that.
	ToolWait, ModelWait time.Duration
}

// CachedEffects stands in front of a node's model actor and tool actors for the
// node's own sessions: each *ModelCall and *ToolCall goes through EffectResults, so
// a key this node performed recently is answered without calling again.
type CachedEffects struct {
	cfg CachedEffectsConfig
}

// NewCachedEffectsProps returns the props of a CachedEffects actor.
func NewCachedEffectsProps(cfg CachedEffectsConfig) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor { return &CachedEffects{cfg: cfg} },
		actor.WithSupervisor(effectStrategy()))
}

// Receive implements actor.Actor.
func (c *CachedEffects) Receive(ctx actor.Context) {
	req, call, ok := effectOf(ctx.Message())
	if !ok {
		return
	}
	wait := c.cfg.ToolWait
	if call.model {
		wait = c.cfg.ModelWait
	}
	sys, cfg := ctx.ActorSystem(), c.cfg
	go func() {
		rep, err := cfg.Results.Do(context.Background(), req.Key.String(), func(pctx context.Context) (messages.EffectReply, error) {
			return PerformEffect(pctx, sys, cfg.Model, cfg.Tools, req, wait)
		})
		if err != nil {
			rep = messages.EffectReply{SessionID: req.SessionID, Key: req.Key, Error: err.Error()}
		}
		sys.Root.Send(call.replyTo, resultOf(call, rep))
	}()
}
