package actors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/troupe-run/troupe/memory"
	pmem "github.com/troupe-run/troupe/pipelines/memory"
)

// Memory namespaces as actors. A MemoryHost supervises one NamespaceActor per
// namespace of the node's memories, spawned on the namespace's first request and
// stopped after IdleTimeout without one; a NamespaceActor supervises one TierActor
// per tier (working, episodic, semantic, perceptual).
//
// A namespace's requests (MemoryDo) run beside each other, off its actor's
// goroutine: the namespace decides the writes called at once one after another and
// appends them together (memory.Namespace, entity.Batch), which it could not if its
// actor ran them one at a time, an Append each. A search (MemorySearch) is prepared by the namespace (the query checked,
// the namespace folded, the query embedded once), ranked by the four tier actors at
// once, each by its tier's formula, and merged by score: the answer of
// memory.Namespace.Search.
//
// Supervision: the host restarts a namespace actor that panicked (at most 10 times
// a minute; its next request folds the namespace from the log again), and a
// namespace restarts a tier actor likewise. A panic in the code a request runs is
// recovered and answered as an error: the request fails, the actor goes on. The
// host itself resumes after a failure, keeping its namespaces.

// MemoryHostConfig configures a MemoryHost.
type MemoryHostConfig struct {
	// Memories are the node's memories (required).
	Memories *memory.Memories
	// IdleTimeout stops a namespace's actor after this long without a request
	// (default 5 minutes); the namespace stays cached in Memories.
	IdleTimeout time.Duration
	Logger      *slog.Logger
}

// MemoryDo asks a namespace's actor to run Fn on the namespace, beside its other
// requests. The answer is a *MemoryDone.
type MemoryDo struct {
	Namespace string
	Ctx       context.Context
	Fn        func(ctx context.Context, ns *memory.Namespace) (any, error)
}

// MemorySearch asks a namespace's actor to search it. The answer is a *MemoryDone
// whose Value is []memory.Result.
type MemorySearch struct {
	Namespace string
	Ctx       context.Context
	Query     memory.Query
}

// MemoryDone answers a MemoryDo or a MemorySearch.
type MemoryDone struct {
	Value any
	Err   error
}

// ErrMemoryHostStopped is the error of a request to a stopped MemoryHost.
var ErrMemoryHostStopped = errors.New("actors: memory host stopped")

// MemoryHost is a node's memory namespaces as actors (see above).
type MemoryHost struct {
	system *actor.ActorSystem
	pid    *actor.PID
}

// NewMemoryHost spawns the host of cfg.Memories' namespaces in system.
func NewMemoryHost(system *actor.ActorSystem, cfg MemoryHostConfig) (*MemoryHost, error) {
	if cfg.Memories == nil {
		return nil, errors.New("actors: memory host without memories")
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 5 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	logger := cfg.Logger
	resume := func(reason any) actor.Directive {
		logger.Error("memory host failed on a message; it goes on with its namespaces", slog.Any("reason", reason))
		return actor.ResumeDirective
	}
	props := actor.PropsFromProducer(func() actor.Actor {
		return &memoryHost{cfg: cfg, byName: map[string]*actor.PID{}, byPID: map[string]string{}}
	},
		actor.WithSupervisor(actor.NewOneForOneStrategy(10, time.Minute, actor.DefaultDecider)),
		actor.WithGuardian(actor.NewOneForOneStrategy(0, 0, resume)))
	pid, err := system.Root.SpawnNamed(props, "memory-"+system.ID)
	if err != nil {
		return nil, fmt.Errorf("actors: spawn memory host: %w", err)
	}
	return &MemoryHost{system: system, pid: pid}, nil
}

// Do runs fn on namespace ns in its actor and returns its result. The wait ends
// with ctx.
func (h *MemoryHost) Do(ctx context.Context, ns string, fn func(context.Context, *memory.Namespace) (any, error)) (any, error) {
	return h.ask(ctx, &MemoryDo{Namespace: ns, Ctx: ctx, Fn: fn})
}

// Search searches namespace ns through its tier actors.
func (h *MemoryHost) Search(ctx context.Context, ns string, q memory.Query) ([]memory.Result, error) {
	res, _, err := h.SearchNoted(ctx, ns, q)
	return res, err
}

// SearchNoted is Search, with the search's note (memory.Namespace.SearchNoted):
// what a hybrid search ranked without, the query's vector or the vector store, and
// why ("" for nothing).
func (h *MemoryHost) SearchNoted(ctx context.Context, ns string, q memory.Query) ([]memory.Result, string, error) {
	v, err := h.ask(ctx, &MemorySearch{Namespace: ns, Ctx: ctx, Query: q})
	if err != nil {
		return nil, "", err
	}
	ans, _ := v.(searchAnswer)
	return ans.results, ans.note, nil
}

// searchAnswer is what a MemorySearch answers: the results and the note.
type searchAnswer struct {
	results []memory.Result
	note    string
}

// memoryAskTimeout bounds a request whose ctx has no deadline.
const memoryAskTimeout = 2 * time.Minute

func (h *MemoryHost) ask(ctx context.Context, msg any) (any, error) {
	if err := memory.CheckNamespace(nsOf(msg)); err != nil {
		return nil, err
	}
	timeout := memoryAskTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
		if timeout <= 0 {
			return nil, ctx.Err()
		}
	}
	f := h.system.Root.RequestFuture(h.pid, msg, timeout)
	done := make(chan struct{})
	var (
		res any
		err error
	)
	go func() {
		res, err = f.Result()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if err != nil {
		if errors.Is(err, actor.ErrTimeout) {
			return nil, fmt.Errorf("actors: namespace %s did not answer in %s: %w", nsOf(msg), timeout, err)
		}
		return nil, fmt.Errorf("%w: %v", ErrMemoryHostStopped, err)
	}
	d, ok := res.(*MemoryDone)
	if !ok {
		return nil, fmt.Errorf("actors: unexpected answer %T from namespace %s", res, nsOf(msg))
	}
	return d.Value, d.Err
}

// Stop stops the host and its namespaces' actors, each after the request it is
// handling, and waits until they stopped or ctx ends (AwaitStop), whose error it
// then returns.
func (h *MemoryHost) Stop(ctx context.Context) error {
	if err := AwaitStop(ctx, h.system, h.pid, h.system.Root.Poison); err != nil {
		return fmt.Errorf("actors: memory host still stopping: %w", err)
	}
	return nil
}

func nsOf(msg any) string {
	switch m := msg.(type) {
	case *MemoryDo:
		return m.Namespace
	case *MemorySearch:
		return m.Namespace
	}
	return ""
}

// memoryHost is the MemoryHost's actor.
type memoryHost struct {
	cfg    MemoryHostConfig
	byName map[string]*actor.PID
	byPID  map[string]string
	// stopping is set once the host stops: see refuseStopping.
	stopping bool
}

func (h *memoryHost) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Stopping:
		h.stopping = true
	case *MemoryDo, *MemorySearch:
		if h.stopping {
			refuseStopping(ctx, "memory host")
			return
		}
		name := nsOf(m)
		pid, ok := h.byName[name]
		if !ok {
			props := actor.PropsFromProducer(func() actor.Actor {
				return &NamespaceActor{name: name, cfg: h.cfg}
			}, actor.WithSupervisor(actor.NewOneForOneStrategy(10, time.Minute, actor.DefaultDecider)))
			pid = ctx.Spawn(props)
			ctx.Watch(pid)
			h.byName[name], h.byPID[pid.Id] = pid, name
		}
		ctx.Forward(pid)
	case *namespacePassivate:
		if name, ok := h.byPID[m.who.Id]; ok {
			delete(h.byPID, m.who.Id)
			if h.byName[name] != nil && h.byName[name].Id == m.who.Id {
				delete(h.byName, name)
			}
			ctx.Poison(m.who)
		}
	case *actor.Terminated:
		if name, ok := h.byPID[m.Who.Id]; ok {
			delete(h.byPID, m.Who.Id)
			if h.byName[name] != nil && h.byName[name].Id == m.Who.Id {
				delete(h.byName, name)
			}
		}
	}
}

// NamespaceActor is one memory namespace: its requests, and its searches through
// its tier actors.
type NamespaceActor struct {
	name  string
	cfg   MemoryHostConfig
	tiers map[memory.Tier]*actor.PID
	idle  *wakeup
	// busy counts the requests and searches under way, which run off the actor's
	// goroutine: the actor is not idle while one runs.
	busy int
	// running holds the requests and searches under way: the actor stops once they ended (a
	// node's Close waits for the writes in hand before it closes the log).
	running sync.WaitGroup
	// stopping is set once the actor stops: see refuseStopping.
	stopping bool
	// passivating is set once the actor asked the host to stop it (passivate).
	passivating bool
}

// namespacePassivate asks the host to stop an idle namespace's actor. The host forgets the
// actor, so that the namespace's next requests start another, and poisons it: a
// user message, after the requests the host forwarded to it before, which run.
// An actor that stopped itself instead (a system message, ahead of its mailbox)
// refused them, or they reached the dead letters: a request sent as a namespace
// went idle failed though the host ran on.
type namespacePassivate struct{ who *actor.PID }

// refuseStopping answers a request that reached a stopping actor (what) with
// ErrMemoryHostStopped. protoactor still hands an actor the user messages of its
// mailbox while it stops (it waits for its children to stop), and a child it
// spawned then, or a request it started, would outlive the stop: a host whose new
// child is never stopped never stops (Close waited its whole timeout), and a
// request would run on memories being closed.
func refuseStopping(ctx actor.Context, what string) {
	if ctx.Sender() != nil {
		ctx.Respond(&MemoryDone{Err: fmt.Errorf("%w: %s stopping", ErrMemoryHostStopped, what)})
	}
}

// namespaceIdle is the idle wakeup's message; searchEnded tells the actor a request
// or a search it started ended.
type (
	namespaceIdle struct{}
	searchEnded   struct{}
)

// Receive implements actor.Actor.
func (a *NamespaceActor) Receive(ctx actor.Context) {
	if a.stopping {
		switch ctx.Message().(type) {
		case *MemoryDo, *MemorySearch:
			refuseStopping(ctx, "namespace "+a.name)
			return
		}
	}
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.tiers = map[memory.Tier]*actor.PID{}
		for _, t := range memory.Tiers {
			props := actor.PropsFromProducer(func() actor.Actor { return &TierActor{tier: t} },
				actor.WithSupervisor(actor.NewOneForOneStrategy(10, time.Minute, actor.DefaultDecider)))
			a.tiers[t] = ctx.Spawn(props)
		}
		a.idle = newWakeup(ctx.ActorSystem().Root, ctx.Self(), a.cfg.IdleTimeout, &namespaceIdle{})
	case *actor.Stopping:
		a.stopping = true
		a.idle.stop()
		a.running.Wait()
	case *actor.Restarting:
		a.idle.stop()
	case *namespaceIdle:
		if a.busy == 0 && !a.passivating {
			// The host stops it (namespacePassivate): requests it forwarded before run first.
			a.passivating = true
			ctx.Send(ctx.Parent(), &namespacePassivate{who: ctx.Self()})
			return
		}
		a.idle.reset(a.cfg.IdleTimeout)
	case *searchEnded:
		a.busy--
	case *MemoryDo:
		a.idle.reset(a.cfg.IdleTimeout)
		a.busy++
		sender, self, root := ctx.Sender(), ctx.Self(), ctx.ActorSystem().Root
		a.running.Add(1)
		go func() {
			defer a.running.Done()
			v, err := a.run(m.Ctx, m.Fn)
			root.Send(sender, &MemoryDone{Value: v, Err: err})
			root.Send(self, &searchEnded{})
		}()
	case *MemorySearch:
		a.idle.reset(a.cfg.IdleTimeout)
		a.busy++
		// The search waits for its tier actors: off the actor's goroutine, so the
		// namespace's next requests are not held up by it.
		sender, self, root, tiers := ctx.Sender(), ctx.Self(), ctx.ActorSystem().Root, a.tiers
		a.running.Add(1) // the tier actors stop after it: a stop waits for it
		go func() {
			defer a.running.Done()
			res, note, err := a.search(m.Ctx, root, tiers, m.Query)
			root.Send(sender, &MemoryDone{Value: searchAnswer{results: res, note: note}, Err: err})
			root.Send(self, &searchEnded{})
		}()
	}
}

// run runs fn on the namespace, answering a panic as an error.
func (a *NamespaceActor) run(ctx context.Context, fn func(context.Context, *memory.Namespace) (any, error)) (v any, err error) {
	defer func() {
		if r := recover(); r != nil {
			a.cfg.Logger.Error("memory request panicked", "namespace", a.name, "panic", r, "stack", string(debug.Stack()))
			v, err = nil, fmt.Errorf("actors: namespace %s: request panicked: %v", a.name, r)
		}
	}()
	if ctx == nil {
		ctx = context.Background()
	}
	ns, err := a.cfg.Memories.Namespace(ctx, a.name)
	if err != nil {
		return nil, err
	}
	return fn(ctx, ns)
}

// search prepares q on the namespace, has each tier actor rank its tier, and
// merges their lists; the note says what the search ranked without, and why.
func (a *NamespaceActor) search(ctx context.Context, root *actor.RootContext, tiers map[memory.Tier]*actor.PID, q memory.Query) ([]memory.Result, string, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	ns, err := a.cfg.Memories.Namespace(ctx, a.name)
	if err != nil {
		return nil, "", err
	}
	ts, err := ns.PrepareSearch(ctx, q)
	if err != nil {
		return nil, "", err
	}
	timeout := memoryAskTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(dl), time.Millisecond)
	}
	var futures []*actor.Future
	for _, t := range ts.Tiers() {
		futures = append(futures, root.RequestFuture(tiers[t], &tierRank{ctx: ctx, search: ts, tier: t}, timeout))
	}
	lists := make([][]pmem.Ranked, 0, len(futures))
	for i, f := range futures {
		res, err := f.Result()
		if err != nil {
			return nil, "", fmt.Errorf("actors: namespace %s: tier %s: %w", a.name, ts.Tiers()[i], err)
		}
		r := res.(*tierRanked)
		if r.err != nil {
			return nil, "", r.err
		}
		lists = append(lists, r.list)
	}
	return ts.Results(lists...), ts.Note(), nil
}

// TierActor ranks one tier's candidates by the tier's formula for its namespace's
// searches.
type TierActor struct {
	tier memory.Tier
}

type (
	tierRank struct {
		ctx    context.Context
		search *memory.TierSearch
		tier   memory.Tier
	}
	tierRanked struct {
		list []pmem.Ranked
		err  error
	}
)

// Receive implements actor.Actor.
func (a *TierActor) Receive(ctx actor.Context) {
	if m, ok := ctx.Message().(*tierRank); ok {
		ctx.Respond(a.rank(m))
	}
}

func (a *TierActor) rank(m *tierRank) (out *tierRanked) {
	defer func() {
		if r := recover(); r != nil {
			out = &tierRanked{err: fmt.Errorf("actors: tier %s: ranking panicked: %v", a.tier, r)}
		}
	}()
	list, err := m.search.Tier(m.ctx, m.tier)
	return &tierRanked{list: list, err: err}
}
