package actors_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"
	"weak"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// A passivated session actor is garbage: nothing the host keeps — its maps, nor
// protoactor's set of its children — still reaches the actor, whose PID caches its
// process (mailbox, context, the actor and its folded state). Without this a node's
// heap held every session it ever ran, up to the most it ran at once.
func TestPassivatedSessionsAreNotRetained(t *testing.T) {
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	model := sys.Root.Spawn(actors.NewModelActorProps(actors.ModelActorConfig{Model: llm.Offline{}}))
	// The tap sees each session's own PID (ReplyTo) and keeps only a weak pointer to it.
	var mu sync.Mutex
	var sessions []weak.Pointer[actor.PID]
	tap := sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		if m, ok := c.Message().(*actors.ModelCall); ok {
			mu.Lock()
			sessions = append(sessions, weak.Make(m.ReplyTo))
			mu.Unlock()
			c.Forward(model)
		}
	}))
	host := sys.Root.Spawn(actors.NewSessionHostProps(actors.SessionDeps{
		Store: lg, Model: tap, IdleTimeout: 20 * time.Millisecond,
		Agent: actors.Agent{Model: llm.OfflineName, SystemPrompt: "test"},
	}))
	t.Cleanup(func() {
		_ = sys.Root.PoisonFuture(host).Wait()
		sys.Shutdown()
		_ = lg.Close()
	})
	const n = 64
	for i := range n {
		e, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: "echo hi"})
		if err != nil {
			t.Fatal(err)
		}
		e.ID, e.SessionID, e.Actor = fmt.Sprintf("t%d", i), fmt.Sprintf("s%d", i), "test"
		res, err := sys.Root.RequestFuture(host, &actors.SubmitTask{Envelope: e}, 10*time.Second).Result()
		if _, ok := res.(*actors.TaskAccepted); err != nil || !ok {
			t.Fatalf("submit %d: %v %v", i, res, err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		live, err := sys.Root.RequestFuture(host, &actors.CountSessions{}, time.Second).Result()
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		asked := len(sessions)
		mu.Unlock()
		if live.(int) == 0 && asked == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: %d session actors live, %d of %d asked the model", live, asked, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Terminated reaches the host after CountSessions may have answered 0; a GC then
	// clears the weak pointers of everything unreachable.
	for {
		runtime.GC()
		retained := 0
		mu.Lock()
		for _, p := range sessions {
			if p.Value() != nil {
				retained++
			}
		}
		mu.Unlock()
		if retained == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d passivated session actors are still reachable", retained, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
