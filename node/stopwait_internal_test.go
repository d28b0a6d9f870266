package node

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
)

// busyNode is a node on a log that holds the first write of session "busy"
// (slowLog) until the test releases it, with that session's actor in that write.
type busyNode struct {
	n       *Node
	log     *slowLog
	release func()
	logs    *syncBuffer
}

func newBusyNode(t *testing.T, sharded bool, cfg Config) *busyNode {
	t.Helper()
	ctx := context.Background()
	base, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	b := &busyNode{logs: &syncBuffer{}, log: &slowLog{Log: base, session: "busy",
		entered: make(chan struct{}), release: make(chan struct{}), written: make(chan struct{})}}
	var once sync.Once
	b.release = func() { once.Do(func() { close(b.log.release) }) }
	model, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{{Content: "done"}}})
	if err != nil {
		t.Fatal(err)
	}
	bus := NewEmbeddedBus(watermill.NopLogger{})
	t.Cleanup(func() { _ = bus.Close() })
	cfg.Log, cfg.NodeID, cfg.Model = b.log, "a", model
	cfg.Logger = slog.New(slog.NewTextHandler(b.logs, nil))
	if sharded {
		cfg.Bus = &Bus{Publisher: bus, Tasks: partitionZero{bus}, Live: bus, Sharded: true, Partition: func(string, int) int { return 0 }}
	}
	b.n, err = New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop, err := b.n.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	t.Cleanup(b.release) // before stop: the actor's write ends
	if sharded {
		b.n.Assigned([]int{0}, 1)
	}
	env, err := b.n.ingress.Admit(Task{Input: "first", SessionID: "busy"})
	if err != nil {
		t.Fatal(err)
	}
	// As handleTask asks, but not from the router, whose Close would wait for it.
	_ = b.n.system.Root.RequestFuture(b.n.host, &actors.SubmitTask{Envelope: env}, time.Minute)
	select {
	case <-b.log.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the session never wrote its task")
	}
	return b
}

// inBackground runs f and returns a channel closed when it returned.
func inBackground(f func()) <-chan struct{} {
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	return done
}

// TestStopsWaitPastProtoactorsTenSeconds: a session's actor is in a write to the
// log that lasts longer than the 10 s after which protoactor's StopFuture and
// PoisonFuture give up (a slow commit; IOTimeout bounds an attempt at 30 s).
// Close, and Revoked on a sharded node, must wait for the actor to finish its
// write and stop, within their own bounds: before, Close went on to close the bus
// and the log (the caller's, once Close returned) under the write, and Revoked
// handed the partitions over while the session still wrote. The write is released
// 11 s after the stop began, and must have returned when Close and Revoked did.
func TestStopsWaitPastProtoactorsTenSeconds(t *testing.T) {
	if testing.Short() {
		t.Skip("holds a write for 11 s")
	}
	const hold = 11 * time.Second // past protoactor's 10 s
	for _, tc := range []struct {
		name    string
		sharded bool
		stop    func(*Node)
	}{
		{"Close", false, func(n *Node) { _ = n.Close() }},
		{"Revoked", true, (*Node).Revoked},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newBusyNode(t, tc.sharded, Config{HandoffGrace: 50 * time.Millisecond, StopTimeout: time.Minute})
			stopped := inBackground(func() { tc.stop(b.n) })
			timer := time.AfterFunc(hold, b.release)
			defer timer.Stop()
			select {
			case <-stopped:
			case <-time.After(hold + time.Minute):
				t.Fatalf("%s did not return within a minute of the write's release", tc.name)
			}
			select {
			case <-b.log.written:
			default:
				t.Fatalf("%s returned while the session's write to the log was still in progress", tc.name)
			}
		})
	}
}

// TestCloseEndsAtStopTimeout: a session's actor is in a write to the log that
// does not end. Close waits for it up to Config.StopTimeout, says so in the log,
// and goes on (it still closes), rather than waiting for protoactor's 10 s.
func TestCloseEndsAtStopTimeout(t *testing.T) {
	b := newBusyNode(t, false, Config{StopTimeout: 100 * time.Millisecond})
	closed := inBackground(func() { _ = b.n.Close() })
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waits for the busy session past its StopTimeout")
	}
	select {
	case <-b.log.written:
		t.Fatal("the write ended on its own; the test holds it")
	default:
	}
	if logs := b.logs.String(); !strings.Contains(logs, "session actors still handling a message past StopTimeout") {
		t.Fatalf("Close gave the busy session up without a word; logs:\n%s", logs)
	}
	// Close is idempotent, and a second one does not wait again.
	if again := inBackground(func() { _ = b.n.Close() }); !closedWithin(again, 5*time.Second) {
		t.Fatal("a second Close hung")
	}
}

func closedWithin(c <-chan struct{}, d time.Duration) bool {
	select {
	case <-c:
		return true
	case <-time.After(d):
		return false
	}
}
