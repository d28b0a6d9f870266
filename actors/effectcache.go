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
	ttl      time.Duration
	max      int
	maxBytes int
	hits     func()

	mu      sync.Mutex
	flights map[string]*effectFlight
	// kept holds the finished flights oldest first (from head on); bytes is their
	// approximate size.
	kept  []*effectFlight
	head  int
	bytes int
	// peak is the most flights held since the map was last rebuilt: a Go map keeps
	// the memory of its largest size, so a map that shrank well below it is copied.
	peak int
}

type effectFlight struct {
	key  string
	done chan struct{}
	rep  messages.EffectReply
	err  error
	at   time.Time // when it finished; zero while in flight
	size int
}

// Defaults of NewEffectResults: the answers a node keeps, by number and by their
// approximate size in memory.
const (
	DefaultEffectAnswers     = 100_000
	DefaultEffectAnswerBytes = 32 << 20
)

// NewEffectResults keeps answers for ttl, at most max of them (default
// DefaultEffectAnswers) and at most maxBytes of them (approximately: their outputs
// and messages plus a fixed cost per answer; default DefaultEffectAnswerBytes),
// dropping the oldest first; hit is called for
// each call answered from an earlier or concurrent performance (nil: none). Answers
// past ttl go on the next call, or on Expire when no call comes.
func NewEffectResults(ttl time.Duration, max, maxBytes int, hit func()) *EffectResults {
	if hit == nil {
		hit = func() {}
	}
	if max <= 0 {
		max = DefaultEffectAnswers
	}
	if maxBytes <= 0 {
		maxBytes = DefaultEffectAnswerBytes
	}
	return &EffectResults{ttl: ttl, max: max, maxBytes: maxBytes, flights: map[string]*effectFlight{}, hits: hit}
}

// Do returns key's answer: a recent one, the one being computed, or perform's.
// A failed perform is not kept: the next call for the key performs it again.
func (r *EffectResults) Do(ctx context.Context, key string, perform func(context.Context) (messages.EffectReply, error)) (messages.EffectReply, error) {
	r.mu.Lock()
	r.evict(time.Now())
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
	f := &effectFlight{key: key, done: make(chan struct{})}
	r.flights[key] = f
	r.peak = max(r.peak, len(r.flights))
	r.mu.Unlock()

	f.rep, f.err = perform(ctx)
	r.mu.Lock()
	if f.err != nil {
		delete(r.flights, key)
	} else {
		f.at, f.size = time.Now(), answerSize(key, f.rep)
		r.kept = append(r.kept, f)
		r.bytes += f.size
		r.evict(f.at)
	}
	r.mu.Unlock()
	close(f.done)
	return f.rep, f.err
}

// answerSize approximates the memory an answer holds: its strings, plus a fixed cost
// for the flight, the reply and their places in the map and the queue.
func answerSize(key string, rep messages.EffectReply) int {
	n := 1024 + 2*len(key) + len(rep.SessionID) + len(rep.Output) + len(rep.Model) + len(rep.Error)
	if m := rep.Message; m != nil {
		n += len(m.Content) + len(m.Name) + len(m.ToolCallID)
		for _, c := range m.ToolCalls {
			n += 64 + len(c.ID) + len(c.Name) + len(c.Arguments)
		}
	}
	return n
}

// Len reports how many answers are kept or being computed.
func (r *EffectResults) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.flights)
}

// Expire drops the answers older than the TTL at now. A node calls it periodically,
// so that answers do not outlive their TTL on a node that gets no more calls.
func (r *EffectResults) Expire(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evict(now)
}

// evict drops the oldest answers while they are past the TTL or over the bounds,
// then gives back the memory of a map and queue that shrank.
func (r *EffectResults) evict(now time.Time) {
	for r.head < len(r.kept) {
		f := r.kept[r.head]
		if len(r.kept)-r.head <= r.max && r.bytes <= r.maxBytes && now.Sub(f.at) <= r.ttl {
			break
		}
		if r.flights[f.key] == f {
			delete(r.flights, f.key)
		}
		r.bytes -= f.size
		r.kept[r.head] = nil
		r.head++
	}
	if r.head > 0 && r.head >= len(r.kept)/2 {
		r.kept = append(make([]*effectFlight, 0, 2*(len(r.kept)-r.head)), r.kept[r.head:]...)
		r.head = 0
	}
	if r.peak >= 1024 && len(r.flights) <= r.peak/4 {
		flights := make(map[string]*effectFlight, len(r.flights))
		for k, f := range r.flights {
			flights[k] = f
		}
		r.flights, r.peak = flights, len(flights)
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
		rep, err := cfg.Results.Do(context.Background(), req.Key, func(pctx context.Context) (messages.EffectReply, error) {
			return PerformEffect(pctx, sys, cfg.Model, cfg.Tools, req, wait)
		})
		if err != nil {
			rep = messages.EffectReply{SessionID: req.SessionID, Key: req.Key, Error: err.Error()}
		}
		sys.Root.Send(call.replyTo, resultOf(call, rep))
	}()
}
