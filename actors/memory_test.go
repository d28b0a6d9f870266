package actors_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/vectorstore"
)

func newMemories(t *testing.T) *memory.Memories {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	v, err := vectorstore.Open(vectorstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = v.Close() })
	m, err := memory.Open(memory.Config{Log: l, Vectors: v})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func newMemoryHost(t *testing.T, m *memory.Memories, idle time.Duration) (*actors.MemoryHost, *actor.ActorSystem) {
	t.Helper()
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	h, err := actors.NewMemoryHost(sys, actors.MemoryHostConfig{Memories: m, IdleTimeout: idle})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := h.Stop(ctx); err != nil {
			t.Error(err)
		}
		sys.Shutdown()
	})
	return h, sys
}

func add(ctx context.Context, h *actors.MemoryHost, ns string, reqs ...memory.AddRequest) ([]memory.AddResult, error) {
	v, err := h.Do(ctx, ns, func(ctx context.Context, n *memory.Namespace) (any, error) {
		return n.Add(ctx, "", reqs)
	})
	if err != nil {
		return nil, err
	}
	return v.([]memory.AddResult), nil
}

// A search through the tier actors answers exactly what the namespace's own Search
// answers, across the four tiers.
func TestMemoryHostSearchesThroughTierActors(t *testing.T) {
	m := newMemories(t)
	h, _ := newMemoryHost(t, m, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var reqs []memory.AddRequest
	for i, tier := range []memory.Tier{memory.Working, memory.Episodic, memory.Semantic, memory.Perceptual} {
		for j := range 5 {
			reqs = append(reqs, memory.AddRequest{Tier: tier, Content: fmt.Sprintf("note %d about tea and mountains, number %d", i, j)})
		}
	}
	if _, err := add(ctx, h, "user:alice", reqs...); err != nil {
		t.Fatal(err)
	}
	q := memory.Query{Text: "tea mountains", Limit: 8}
	got, err := h.Search(ctx, "user:alice", q)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := m.Namespace(ctx, "user:alice")
	if err != nil {
		t.Fatal(err)
	}
	want, err := ns.Search(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	// The same memories in the same order, with the same scores (up to the few
	// microseconds of recency between the two searches).
	if len(got) != 8 || len(want) != 8 {
		t.Fatalf("%d results through the actors, %d direct; want 8", len(got), len(want))
	}
	for i := range got {
		if got[i].Memory.ID != want[i].Memory.ID || math.Abs(got[i].Score-want[i].Score) > 1e-6 {
			t.Fatalf("result %d: %s %.9f through the actors, %s %.9f direct", i, got[i].Memory.ID, got[i].Score, want[i].Memory.ID, want[i].Score)
		}
	}
	tiers := map[memory.Tier]bool{}
	for _, r := range got {
		tiers[r.Memory.Tier] = true
	}
	if len(tiers) < 2 {
		t.Fatalf("results from tiers %v: want several", tiers)
	}
	if _, err := h.Search(ctx, "user:alice", memory.Query{Text: "x", Mode: "fuzzy"}); !errors.Is(err, memory.ErrInvalid) {
		t.Fatalf("bad mode: %v", err)
	}
	if _, err := h.Search(ctx, "user alice", q); !errors.Is(err, memory.ErrInvalid) {
		t.Fatalf("bad namespace: %v", err)
	}
}

// A request that panics fails alone: the namespace's actor answers the next one.
func TestMemoryHostContainsAPanic(t *testing.T) {
	h, _ := newMemoryHost(t, newMemories(t), time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := h.Do(ctx, "user:bob", func(context.Context, *memory.Namespace) (any, error) { panic("boom") })
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("panicking request: %v", err)
	}
	res, err := add(ctx, h, "user:bob", memory.AddRequest{Tier: memory.Semantic, Content: "Bob likes chess."})
	if err != nil || len(res) != 1 || res[0].ID == "" {
		t.Fatalf("after the panic: %v %v", res, err)
	}
}

// Writes to one namespace run one at a time, in order; an idle namespace's actor
// stops, and its next request starts it again with everything there.
// heldLog counts its Appends and holds the first until want requests entered
// their function (a hang guard ends the wait, failing the test).
type heldLog struct {
	eventlog.Log
	appends atomic.Int64
	entered atomic.Int64
	want    int64
}

func (l *heldLog) Append(ctx context.Context, events []messages.Envelope) error {
	if l.appends.Add(1) == 1 {
		deadline := time.Now().Add(20 * time.Second)
		for l.entered.Load() < l.want && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
	return l.Log.Append(ctx, events)
}

// A namespace's writes run beside each other, so that the namespace appends those
// called at once together: 20 adds while the first one's Append is in flight all
// run, and take fewer Appends than 20. Before, the namespace's actor ran them one
// at a time, an Append each. Passivation still stops the idle actor.
func TestMemoryHostRunsWritesTogetherAndPassivates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sl, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sl.Close() })
	v, err := vectorstore.Open(vectorstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = v.Close() })
	const n = 20
	l := &heldLog{Log: sl, want: n}
	m, err := memory.Open(memory.Config{Log: l, Vectors: v})
	if err != nil {
		t.Fatal(err)
	}
	h, _ := newMemoryHost(t, m, 50*time.Millisecond)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := h.Do(ctx, "agent:x", func(ctx context.Context, ns *memory.Namespace) (any, error) {
				l.entered.Add(1)
				return ns.Add(ctx, fmt.Sprintf("k%d", i), []memory.AddRequest{{Tier: memory.Semantic, Content: fmt.Sprintf("fact %d", i)}})
			})
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := l.entered.Load(); got != n {
		t.Fatalf("%d writes entered", got)
	}
	if got := l.appends.Load(); got >= n {
		t.Errorf("%d writes called at once took %d Appends; want them grouped", n, got)
	}
	time.Sleep(200 * time.Millisecond) // past the idle timeout: the actor stops
	res, err := h.Search(ctx, "agent:x", memory.Query{Text: "fact", Limit: 100, Mode: memory.ModeKeyword})
	if err != nil || len(res) != n {
		t.Fatalf("after passivation: %d results, %v", len(res), err)
	}
	t.Logf("%d writes at once: %d Appends", n, l.appends.Load())
}

// Requests that reach the host while it stops (protoactor hands a stopping actor
// the user messages of its mailbox while it waits for its children) are answered
// ErrMemoryHostStopped: before, each spawned a namespace actor that the stop never
// reached, and the host never stopped (a node's Close waited its StopTimeout out).
func TestMemoryHostStopsWithRequestsArrivingMeanwhile(t *testing.T) {
	m := newMemories(t)
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	t.Cleanup(sys.Shutdown)
	h, err := actors.NewMemoryHost(sys, actors.MemoryHostConfig{Memories: m, IdleTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// A request in hand keeps its namespace's actor, and so the host, stopping.
	started, release := make(chan struct{}), make(chan struct{})
	go func() {
		_, _ = h.Do(ctx, "user:slow", func(context.Context, *memory.Namespace) (any, error) {
			close(started)
			<-release
			return nil, nil
		})
	}()
	<-started
	stopped := make(chan error, 1)
	go func() { stopped <- h.Stop(ctx) }()
	refused := false
	for i := 0; i < 200 && !refused; i++ {
		_, err := h.Do(ctx, fmt.Sprintf("user:late%d", i), func(context.Context, *memory.Namespace) (any, error) { return nil, nil })
		switch {
		case errors.Is(err, actors.ErrMemoryHostStopped):
			refused = true
		case err != nil:
			t.Fatal(err)
		}
	}
	close(release)
	if err := <-stopped; err != nil {
		t.Fatalf("the host did not stop: %v", err)
	}
	if !refused {
		t.Fatal("no request was refused while the host stopped")
	}
}

// A request that reaches a namespace while it passivates (its idle timeout ended
// with nothing under way) runs: the namespace's actor, or the one started after
// it, answers it. Before, the request was forwarded to the stopping actor and
// refused ErrMemoryHostStopped (or reached the dead letters), though the host ran
// on: a write sent as a namespace went idle failed.
func TestMemoryRequestsRacingPassivationRun(t *testing.T) {
	m := newMemories(t)
	h, _ := newMemoryHost(t, m, time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	failed := 0
	var first error
	for i := range 400 {
		var err error
		if i%2 == 0 {
			_, err = h.Do(ctx, "agent:idle", func(context.Context, *memory.Namespace) (any, error) { return i, nil })
		} else {
			_, err = h.Search(ctx, "agent:idle", memory.Query{Text: "fact", Limit: 10, Mode: memory.ModeKeyword})
		}
		if err != nil {
			failed++
			if first == nil {
				first = err
			}
		}
		// About the idle timeout: the next request meets the namespace as it passivates.
		time.Sleep(time.Duration(800+i%5*100) * time.Microsecond)
	}
	if failed > 0 {
		t.Fatalf("%d of 400 requests to a namespace that passivates between them failed; the first: %v", failed, first)
	}
}
