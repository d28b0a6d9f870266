package actors

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
	"weak"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// Session actors that passivated, after their idle timeout or to make room
// (MaxLiveSessions), are garbage: nothing of the host, the actor system or the effects
// keeps them (or their folded state) reachable. The test holds only weak pointers to
// them.
func TestPassivatedSessionsAreNotRetained(t *testing.T) {
	t.Run("idle", func(t *testing.T) { testRetention(t, 20*time.Millisecond, 0) })
	t.Run("evicted", func(t *testing.T) { testRetention(t, time.Hour, 4) })
}

// testRetention runs one-step tasks on 64 sessions and checks that at most maxLive
// session actors stay reachable once they passivated.
func testRetention(t *testing.T, idle time.Duration, maxLive int) {
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	sys := quietSystem()
	reg, err := tools.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	effects := NewLocalEffects(LocalEffectsConfig{Model: llm.Offline{}, Tools: reg})
	var mu sync.Mutex
	var sessions []weak.Pointer[SessionActor]
	host := sys.Root.Spawn(NewSessionHostProps(SessionDeps{
		Store: lg, Effects: effects, IdleTimeout: idle, MaxLiveSessions: maxLive,
		Agent: Agent{Model: llm.OfflineName, SystemPrompt: "test"},
		spawned: func(a *SessionActor) {
			mu.Lock()
			sessions = append(sessions, weak.Make(a))
			mu.Unlock()
		},
	}))
	t.Cleanup(func() {
		_ = sys.Root.PoisonFuture(host).Wait()
		_ = effects.Close()
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
		res, err := sys.Root.RequestFuture(host, &SubmitTask{Envelope: e}, 10*time.Second).Result()
		if _, ok := res.(*TaskAccepted); err != nil || !ok {
			t.Fatalf("submit %d: %v %v", i, res, err)
		}
	}
	// Every session finishes its task and passivates.
	deadline := time.Now().Add(10 * time.Second)
	for i := range n {
		for {
			events, err := lg.Read(context.Background(), fmt.Sprintf("s%d", i), 1)
			if err != nil {
				t.Fatal(err)
			}
			if k := len(events); k > 0 && events[k-1].Type == messages.TypeTaskCompleted {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("session s%d did not complete its task in 10 s", i)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	for {
		live, err := sys.Root.RequestFuture(host, &CountSessions{}, time.Second).Result()
		if err != nil {
			t.Fatal(err)
		}
		if live.(int) <= maxLive {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: %d session actors live", live)
		}
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	spawned := len(sessions)
	mu.Unlock()
	if spawned != n {
		t.Fatalf("the host created %d session actors, want %d", spawned, n)
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
		if retained <= maxLive {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d session actors are still reachable, want at most %d (the live ones)", retained, n, maxLive)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
