package actors_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/asynkron/protoactor-go/actor"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/clickhouse"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// The claims of a sharded node: its session actors append under the lease of
// their session's partition (as the node's leasedStore does), and start the tasks
// of sessions that are not running, bus tasks included, by claiming the session
// (eventlog.Claiming) instead of reading its log.

// fencedLog is the log both a sharded node's tests run on: it fences and claims.
type fencedLog interface {
	eventlog.Log
	eventlog.Fencing
	eventlog.Claiming
}

// leasedLog is a fencedLog written under a lease, as a sharded node's session
// actors write it.
type leasedLog struct {
	log   fencedLog
	lease eventlog.Lease
}

var _ actors.ClaimingStore = leasedLog{}

func (s leasedLog) Append(ctx context.Context, events []messages.Envelope) error {
	return s.log.AppendLeased(ctx, s.lease, events)
}

func (s leasedLog) Claim(ctx context.Context, events []messages.Envelope) error {
	return s.log.ClaimLeased(ctx, s.lease, events)
}

func (s leasedLog) Read(ctx context.Context, sessionID string, fromSeq uint64) ([]messages.Envelope, error) {
	return s.log.Read(ctx, sessionID, fromSeq)
}

// forEachFencedLog runs test against SQLite, and against ClickHouse when
// TROUPE_TEST_CLICKHOUSE names a server (where a newer owner's append at a seq
// holding an older epoch's event does not conflict: a plain append at seq 1
// would shadow the session's events there).
func forEachFencedLog(t *testing.T, test func(t *testing.T, open func() fencedLog)) {
	t.Run("sqlite", func(t *testing.T) {
		dir := t.TempDir()
		test(t, func() fencedLog {
			l, err := sqlite.Open(context.Background(), sqlite.Config{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
			return l
		})
	})
	t.Run("clickhouse", func(t *testing.T) {
		addr := os.Getenv("TROUPE_TEST_CLICKHOUSE")
		if addr == "" {
			t.Skip("TROUPE_TEST_CLICKHOUSE is not set (see deploy/clickhouse.sh)")
		}
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		db := "troupe_test_" + hex.EncodeToString(b)
		t.Cleanup(func() {
			conn, err := ch.Open(&ch.Options{Addr: clickhouse.SplitAddr(addr), Protocol: ch.Native})
			if err != nil {
				return
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+db)
		})
		test(t, func() fencedLog {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			l, err := clickhouse.Open(ctx, clickhouse.Config{Addr: clickhouse.SplitAddr(addr), Database: db, FlushInterval: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
			return l
		})
	})
}

// shardedNode is a session host that owns partition 0 of a cluster under a new
// epoch, and republishes what it starts (as a node that was assigned the
// partition does).
type shardedNode struct {
	t      *testing.T
	system *actor.ActorSystem
	host   *actor.PID
	log    fencedLog
	model  *promptsModel
	calls  *countingModel
	// stop stops the node (its host, effects and actor system), once.
	stop func()
}

func newShardedNode(t *testing.T, log fencedLog, name string) *shardedNode {
	t.Helper()
	epoch, err := log.Own(context.Background(), name, []int{0})
	if err != nil {
		t.Fatal(err)
	}
	model := &promptsModel{Model: llm.Offline{}, prompts: map[string][]messages.ChatMessage{}}
	calls := &countingModel{Model: model}
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	effects := actors.NewLocalEffects(actors.LocalEffectsConfig{Model: calls})
	deps := actors.SessionDeps{
		Store: leasedLog{log: log, lease: eventlog.Lease{Partition: 0, Epoch: epoch}}, Effects: effects,
		Agent: actors.Agent{Model: "offline", SystemPrompt: "test"},
	}
	n := &shardedNode{t: t, system: sys, host: sys.Root.Spawn(actors.NewSessionHostProps(deps)), log: log, model: model, calls: calls}
	n.stop = sync.OnceFunc(func() {
		_ = sys.Root.PoisonFuture(n.host).Wait()
		_ = effects.Close()
		sys.Shutdown()
	})
	t.Cleanup(n.stop)
	if _, err := sys.Root.RequestFuture(n.host, &actors.SetOwnership{Owns: func(string) bool { return true }, Republish: true}, 10*time.Second).Result(); err != nil {
		t.Fatal(err)
	}
	return n
}

// submit submits a task as it comes from the bus (not New) and returns the answer.
func (n *shardedNode) submit(session, id, input string) *actors.TaskAccepted {
	n.t.Helper()
	e, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: input})
	if err != nil {
		n.t.Fatal(err)
	}
	e.ID, e.SessionID, e.Actor = id, session, "test"
	res, err := n.system.Root.RequestFuture(n.host, &actors.SubmitTask{Envelope: e}, 10*time.Second).Result()
	if err != nil {
		n.t.Fatal(err)
	}
	acc, ok := res.(*actors.TaskAccepted)
	if !ok {
		n.t.Fatalf("task %s: %v", id, res)
	}
	return acc
}

// waitEnded waits until the log holds the end of task.
func waitEnded(t *testing.T, log eventlog.Log, session, task string) []messages.Envelope {
	t.Helper()
	var events []messages.Envelope
	waitUntil(t, "task "+task+" ended", func() bool {
		var err error
		if events, err = log.Read(context.Background(), session, 1); err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(events, func(e messages.Envelope) bool {
			return e.CorrelationID == task && (e.Type == messages.TypeTaskCompleted || e.Type == messages.TypeTaskFailed)
		})
	})
	return events
}

// A bus task delivered again to the partition's next owner (its first owner
// recorded it and ran it to the end, and the bus offset was not committed) is a
// duplicate: the new owner's claim of the session is refused although the batch
// it would write is the very one stored (same task ID at seq 1, same event IDs
// after it), and under an older epoch; the session reads its events, performs no
// effect again, and appends nothing.
func TestRedeliveredBusTaskOnANewOwnerRepeatsNothing(t *testing.T) {
	forEachFencedLog(t, func(t *testing.T, open func() fencedLog) {
		log := open()
		a := newShardedNode(t, log, "node-a")
		if acc := a.submit("s", "t1", "echo hi"); acc.Seq != 1 || acc.Duplicate {
			t.Fatalf("first delivery: %+v", acc)
		}
		before := waitEnded(t, log, "s", "t1")
		a.stop()

		b := newShardedNode(t, log, "node-b")
		acc := b.submit("s", "t1", "echo hi")
		if !acc.Duplicate {
			t.Fatalf("delivered again to the new owner: %+v, want a duplicate", acc)
		}
		// A task of another session, run to its end, lets whatever the first one
		// issued reach the model first.
		b.submit("other", "t9", "echo later")
		waitEnded(t, log, "other", "t9")
		if n := b.calls.total(); n != 1 {
			t.Fatalf("the new owner called the model %d times, want once (for the other session's task)", n)
		}
		after, err := log.Read(context.Background(), "s", 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(after) != len(before) {
			t.Fatalf("the session holds %s after the task came again, want %s", types(after), types(before))
		}
	})
}

// A bus task of a session whose events the partition's previous owner wrote, on
// the new owner, reads those events and is recorded after them, with them in its
// prompt: the claim of the session is refused, whatever the epochs.
func TestBusTaskOnANewOwnerContinuesThePreviousOwnersSession(t *testing.T) {
	forEachFencedLog(t, func(t *testing.T, open func() fencedLog) {
		log := open()
		a := newShardedNode(t, log, "node-a")
		a.submit("s", "t1", "echo first")
		first := waitEnded(t, log, "s", "t1")
		a.stop()

		b := newShardedNode(t, log, "node-b")
		acc := b.submit("s", "t2", "echo second")
		if want := uint64(len(first) + 1); acc.Seq != want || acc.Duplicate {
			t.Fatalf("second task: %+v, want it accepted at seq %d", acc, want)
		}
		events := waitEnded(t, log, "s", "t2")
		assertGapFree(t, events)
		for i, e := range first {
			if events[i].ID != e.ID {
				t.Fatalf("events %s: the first task's events are not kept", types(events))
			}
		}
		if got := decode[*messages.TaskCompleted](t, events[len(events)-1]).Output; got != "second" {
			t.Fatalf("second output %q", got)
		}
		var text []string
		for _, m := range b.model.prompt(events[acc.Seq].ID) {
			text = append(text, m.Content)
		}
		if all := strings.Join(text, " | "); !strings.Contains(all, "echo first") {
			t.Fatalf("the second task's model call did not see the first task: %s", all)
		}
	})
}

// lostAnswer is a log whose first claim is written but answered with an error, as
// when the connection breaks after the write reached the log.
type lostAnswer struct {
	*sqlite.Log
	lost atomic.Bool
}

func (s *lostAnswer) Claim(ctx context.Context, events []messages.Envelope) error {
	err := s.Log.Claim(ctx, events)
	if err == nil && s.lost.CompareAndSwap(false, true) {
		return errors.New("connection lost while the claim was being written")
	}
	return err
}

// A claim retried after an attempt that wrote the batch but was answered with an
// error finds the session taken by its own batch: the session reads it, issues
// the model call it requested (once), and publishes the batch, which nobody
// published, before it goes on.
func TestClaimWrittenButAnsweredLate(t *testing.T) {
	var store *lostAnswer
	pub := &recordingPublisher{got: map[string][]*message.Message{}}
	model := &countingModel{Model: llm.Offline{}}
	h := newHarness(t, harnessOpts{model: model,
		store: func(l *sqlite.Log) actors.EventStore { store = &lostAnswer{Log: l}; return store },
		deps:  func(d *actors.SessionDeps) { d.Publisher = pub }})
	res := h.submitNew("s", "t1", `{"input":"echo hi"}`)
	if acc, ok := res.(*actors.TaskAccepted); !ok || !acc.Duplicate {
		t.Fatalf("task: %#v, want it found recorded (a duplicate) once the session read its log", res)
	}
	events := h.wait("s")
	assertGapFree(t, events)
	if got := decode[*messages.TaskCompleted](t, events[len(events)-1]).Output; got != "hi" {
		t.Fatalf("output %q", got)
	}
	if n := model.total(); n != 1 {
		t.Fatalf("the model was called %d times, want once", n)
	}
	waitUntil(t, "every event published", func() bool {
		pub.mu.Lock()
		defer pub.mu.Unlock()
		seen := map[string]bool{}
		for _, m := range pub.got[messages.TopicEvents] {
			seen[m.UUID] = true
		}
		for _, e := range events {
			if !seen[e.ID] {
				return false
			}
		}
		return true
	})
}
