package a2a

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

// leaseTask is the task whose notifications the lease tests post.
const leaseTask = sdk.TaskID("s1~0123456789abcdef0123456789abcdef")

// pushNode is what posts a task's notifications on one node over a shared log:
// its PushStore (on a clock the test moves) and its sender, as NewServer builds
// them.
type pushNode struct {
	store  *PushStore
	sender *PushSender
	send   storeSender
	clock  atomic.Int64 // nanoseconds past leaseEpoch
	// finals are the ends the sender recorded as posted.
	finals chan sdk.TaskState
}

var leaseEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newPushNode(t *testing.T, log eventlog.Log) *pushNode {
	t.Helper()
	n := &pushNode{finals: make(chan sdk.TaskState, 8)}
	n.store = NewPushStore(log, nil, nil)
	n.store.now = func() time.Time { return leaseEpoch.Add(time.Duration(n.clock.Load())) }
	ps, err := NewPushSender([]string{"127.0.0.1"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ps.backoff = time.Millisecond
	ps.final = func(ctx context.Context, task sdk.TaskID, configID string, state sdk.TaskState, status int) {
		if err := n.store.Final(ctx, task, configID, state, status); err != nil {
			t.Errorf("recording the end posted: %v", err)
		}
		n.finals <- state
	}
	t.Cleanup(func() { _ = ps.Close() })
	n.sender, n.send = ps, storeSender{PushSender: ps, store: n.store}
	return n
}

// post sends the task in state st to the task's config c.
func (n *pushNode) post(t *testing.T, c *sdk.PushConfig, st sdk.TaskState) {
	t.Helper()
	if err := n.send.SendPush(context.Background(), c, &sdk.Task{ID: leaseTask, ContextID: "s1", Status: sdk.TaskStatus{State: st}}); err != nil {
		t.Fatal(err)
	}
}

// idle waits until the node has no post of the task to c queued or in flight.
func (n *pushNode) idle(t *testing.T, c *sdk.PushConfig) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for n.sender.busy(leaseTask, c) {
		if time.Now().After(deadline) {
			t.Fatal("the node's posts did not end within 20 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// leaseHook is a webhook that records the states it took, in the order it took
// them (once it answered); with hold, it answers an update of the running task
// only once hold closes.
type leaseHook struct {
	mu     sync.Mutex
	states []sdk.TaskState
	in     chan struct{} // closed when an update of the running task came
	inOnce sync.Once
	hold   chan struct{}
}

func newLeaseHook(t *testing.T, hold bool) (*leaseHook, string) {
	h := &leaseHook{in: make(chan struct{})}
	if hold {
		h.hold = make(chan struct{})
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var task sdk.Task
		if err := json.Unmarshal(b, &task); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if !task.Status.State.Terminal() {
			h.inOnce.Do(func() { close(h.in) })
			if h.hold != nil {
				<-h.hold
			}
		}
		h.mu.Lock()
		h.states = append(h.states, task.Status.State)
		h.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	return h, srv.URL
}

func (h *leaseHook) got() []sdk.TaskState {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.states)
}

// twoPushNodes returns two nodes over one log, and the task's config as both
// read it.
func twoPushNodes(t *testing.T, url string) (a, b *pushNode, c *sdk.PushConfig) {
	t.Helper()
	ctx := context.Background()
	log, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	a, b = newPushNode(t, log), newPushNode(t, log)
	if _, err := a.store.Save(ctx, leaseTask, &sdk.PushConfig{ID: "c1", URL: url}); err != nil {
		t.Fatal(err)
	}
	configs, err := b.store.List(ctx, leaseTask)
	if err != nil || len(configs) != 1 {
		t.Fatalf("the task's configs as the other node reads them: %v, %v", configs, err)
	}
	return a, b, configs[0]
}

// A node posting a stale update of a running task (read before it ended) does
// not post it after another node posted the task's end, even though the end is
// recorded (A2APushFinal) and the configs this node read are stale (read less
// than pushRefresh ago: its clock stands still). Before, it checked the configs
// it had read (PushStore.EndPosted) and posted: the webhook heard the task run
// again after its end.
func TestPushStaleUpdateIsNotPostedAfterAnotherNodesEnd(t *testing.T) {
	hook, url := newLeaseHook(t, false)
	a, b, c := twoPushNodes(t, url)
	a.post(t, c, sdk.TaskStateWorking)
	a.idle(t, c)
	a.post(t, c, sdk.TaskStateCompleted)
	select {
	case <-a.finals:
	case <-time.After(20 * time.Second):
		t.Fatal("the end was not posted within 20 s")
	}
	b.post(t, c, sdk.TaskStateWorking)
	b.idle(t, c)
	if got, want := hook.got(), []sdk.TaskState{sdk.TaskStateWorking, sdk.TaskStateCompleted}; !slices.Equal(got, want) {
		t.Fatalf("the webhook took %v, want %v: a stale update posted after another node's end", got, want)
	}
}

// A node's end is not posted while another node's update of the running task is
// in flight (the other node checked that the end was not posted, then posted):
// it waits for the other node's lease of the task's notifications to expire
// (its clock moves past it), and lands after the update. Before, it was posted
// at once, and the update landed after it: the webhook heard the task run again.
func TestPushEndWaitsForAnotherNodesUpdateInFlight(t *testing.T) {
	hook, url := newLeaseHook(t, true)
	a, b, c := twoPushNodes(t, url)
	b.post(t, c, sdk.TaskStateWorking)
	select {
	case <-hook.in:
	case <-time.After(20 * time.Second):
		t.Fatal("the update was not posted within 20 s")
	}
	a.post(t, c, sdk.TaskStateCompleted)
	ended := false
	select {
	case <-a.finals: // the end was posted while the update was in flight
		ended = true
	case <-time.After(time.Second): // a bound on a wait for what must not come
	}
	close(hook.hold)
	b.idle(t, c)
	a.clock.Store(int64(pushLeaseTerm + time.Second))
	if !ended {
		select {
		case <-a.finals:
		case <-time.After(20 * time.Second):
			t.Fatalf("the end was not posted within 20 s once the other node's lease expired; the webhook took %v", hook.got())
		}
	}
	if got, want := hook.got(), []sdk.TaskState{sdk.TaskStateWorking, sdk.TaskStateCompleted}; !slices.Equal(got, want) {
		t.Fatalf("the webhook took %v, want %v: an update landed after another node's end", got, want)
	}
}

// A node alone posting a task's notifications writes one lease to the log per
// lease term, not one per post.
func TestPushLeaseIsOneWritePerTerm(t *testing.T) {
	hook, url := newLeaseHook(t, false)
	a, _, c := twoPushNodes(t, url)
	for _, st := range []sdk.TaskState{sdk.TaskStateSubmitted, sdk.TaskStateWorking, sdk.TaskStateInputRequired, sdk.TaskStateWorking} {
		a.post(t, c, st)
		a.idle(t, c)
	}
	a.clock.Store(int64(pushLeaseTerm - pushLeaseMargin + time.Second)) // too little left for a post: renewed
	a.post(t, c, sdk.TaskStateCompleted)
	select {
	case <-a.finals:
	case <-time.After(20 * time.Second):
		t.Fatal("the end was not posted within 20 s")
	}
	if got := hook.got(); len(got) != 5 {
		t.Fatalf("the webhook took %v, want all 5 posts", got)
	}
	events, err := a.store.log.Read(context.Background(), PushStreamFor(leaseTask), 1)
	if err != nil {
		t.Fatal(err)
	}
	leases := 0
	for _, e := range events {
		if p, err := e.Decode(); err == nil {
			if f, ok := p.(*messages.A2APushFinal); ok && f.Holder != "" {
				leases++
			}
		}
	}
	if leases != 2 {
		t.Fatalf("%d leases written, want 2 (taken, then renewed once)", leases)
	}
}

// A lease is an A2APushFinal of no config: a build that knows no leases (a node
// not upgraded yet over the same log) folds it as the end posted to no config,
// nothing, and reads the task's configs as before.
func TestPushLeaseIsNothingToABuildWithoutLeases(t *testing.T) {
	hook, url := newLeaseHook(t, false)
	a, _, c := twoPushNodes(t, url)
	a.post(t, c, sdk.TaskStateWorking)
	a.idle(t, c)
	if got := hook.got(); len(got) != 1 {
		t.Fatalf("the webhook took %v", got)
	}
	events, err := a.store.log.Read(context.Background(), PushStreamFor(leaseTask), 1)
	if err != nil {
		t.Fatal(err)
	}
	leases := 0
	for _, e := range events {
		if e.Type != messages.TypeA2APushFinal {
			continue
		}
		// The fields of A2APushFinal a build without leases reads.
		var old struct {
			ConfigID string `json:"config_id"`
			State    string `json:"state"`
		}
		if err := json.Unmarshal(e.Payload, &old); err != nil || old.ConfigID != "" || old.State != "" {
			t.Fatalf("a lease as a build without leases reads it: %+v, %v", old, err)
		}
		leases++
	}
	if leases != 1 {
		t.Fatalf("%d leases in the task's push stream, want 1", leases)
	}
	if u, err := NewPushStore(a.store.log, nil, nil).Unfinished(context.Background(), leaseTask); err != nil || len(u) != 1 {
		t.Fatalf("the configs the end was not posted to: %v, %v", u, err)
	}
}

// A node alone on its log (ServerConfig.PushAlone: an embedded node's SQLite
// log, locked for it) restarted after a crash posts a task's end at once, though
// its run before the crash left a lease of the task's notifications that has not
// expired: that run is gone. And it writes no lease of its own: a post costs the
// log nothing. Before, the end waited for the lease to expire (90 s of silence at
// the webhook after every crash), and each term of posting wrote a lease.
func TestPushAloneIgnoresTheLeaseOfItsRunBeforeACrash(t *testing.T) {
	hook, url := newLeaseHook(t, false)
	ctx := context.Background()
	log, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	crashed := newPushNode(t, log)
	if _, err := crashed.store.Save(ctx, leaseTask, &sdk.PushConfig{ID: "c1", URL: url}); err != nil {
		t.Fatal(err)
	}
	configs, err := crashed.store.List(ctx, leaseTask)
	if err != nil || len(configs) != 1 {
		t.Fatalf("the task's configs: %v, %v", configs, err)
	}
	c := configs[0]
	crashed.post(t, c, sdk.TaskStateWorking)
	crashed.idle(t, c)
	_ = crashed.sender.Close() // killed: its lease is not given up

	restarted := newPushNode(t, log)
	restarted.store.alone = true
	restarted.clock.Store(int64(time.Second))
	restarted.post(t, c, sdk.TaskStateWorking)
	restarted.idle(t, c)
	restarted.post(t, c, sdk.TaskStateCompleted)
	select {
	case <-restarted.finals:
	case <-time.After(5 * time.Second):
		t.Fatalf("the end was not posted within 5 s of the restart (the run before the crash holds a lease); the webhook took %v", hook.got())
	}
	if got, want := hook.got(), []sdk.TaskState{sdk.TaskStateWorking, sdk.TaskStateWorking, sdk.TaskStateCompleted}; !slices.Equal(got, want) {
		t.Fatalf("the webhook took %v, want %v", got, want)
	}
	events, err := log.Read(ctx, PushStreamFor(leaseTask), 1)
	if err != nil {
		t.Fatal(err)
	}
	leases := 0
	for _, e := range events {
		if p, err := e.Decode(); err == nil {
			if f, ok := p.(*messages.A2APushFinal); ok && f.Holder != "" {
				leases++
			}
		}
	}
	if leases != 1 {
		t.Fatalf("%d leases in the task's push stream, want 1 (the crashed run's): a node alone takes none", leases)
	}
}

// readCounter is a log that counts the reads of a stream.
type readCounter struct {
	eventlog.Log
	reads atomic.Int64
}

func (l *readCounter) Read(ctx context.Context, stream string, from uint64) ([]messages.Envelope, error) {
	l.reads.Add(1)
	return l.Log.Read(ctx, stream, from)
}

// A node holding the lease of a task's notifications posts them without
// reading the task's push stream: no other node writes a lease nor posts an end
// while it holds it. Before, each post more than pushRefresh after the last
// read the stream again: a read of the log per post.
func TestPushLeaseHolderPostsWithoutReading(t *testing.T) {
	hook, url := newLeaseHook(t, false)
	ctx := context.Background()
	raw, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	log := &readCounter{Log: raw}
	a := newPushNode(t, log)
	c, err := a.store.Save(ctx, leaseTask, &sdk.PushConfig{ID: "c1", URL: url})
	if err != nil {
		t.Fatal(err)
	}
	a.post(t, c, sdk.TaskStateWorking) // takes the lease
	a.idle(t, c)
	before := log.reads.Load()
	for i := range 5 {
		a.clock.Store(int64(time.Duration(i+1) * 2 * pushRefresh))
		a.post(t, c, sdk.TaskStateWorking)
		a.idle(t, c)
	}
	if got := hook.got(); len(got) != 6 {
		t.Fatalf("the webhook took %v, want 6 updates", got)
	}
	if n := log.reads.Load() - before; n != 0 {
		t.Fatalf("%d reads of the log for 5 posts under the lease, want none", n)
	}
}

// A node's update of a task that waits for its client (input-required) while
// another node holds the lease of the task's notifications waits for the lease,
// as an end does, instead of being left to the holder: the task may post
// nothing more until its client answers, which it does only once it learns the
// task waits. Before, it was skipped, and the webhook never heard that the task
// needs input.
func TestPushInputRequiredWaitsForAnotherNodesLease(t *testing.T) {
	hook, url := newLeaseHook(t, false)
	a, b, c := twoPushNodes(t, url)
	b.post(t, c, sdk.TaskStateWorking) // b takes the lease, then follows the task no more
	b.idle(t, c)
	a.post(t, c, sdk.TaskStateInputRequired)
	time.Sleep(100 * time.Millisecond) // a's claim finds b's lease
	a.clock.Store(int64(pushLeaseTerm + time.Second))
	a.idle(t, c)
	if got, want := hook.got(), []sdk.TaskState{sdk.TaskStateWorking, sdk.TaskStateInputRequired}; !slices.Equal(got, want) {
		t.Fatalf("the webhook took %v, want %v: it never hears that the task waits for input", got, want)
	}
}

// An end that waited for the lease of the task's notifications until its time
// ran out, another node holding it all along, is not posted: that is said with a
// warning (a node posts it again within the hour), not at debug level as a
// notification left to the holder. Before, an end lost so left no trace in the
// node's log.
func TestPushEndThatNeverGotTheLeaseIsWarned(t *testing.T) {
	hook, url := newLeaseHook(t, false)
	a, b, c := twoPushNodes(t, url)
	b.post(t, c, sdk.TaskStateWorking) // b takes the lease; the clocks stand still
	b.idle(t, c)
	var logs syncBuffer
	a.sender.logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	a.sender.endTimeout = 300 * time.Millisecond
	a.post(t, c, sdk.TaskStateCompleted)
	a.idle(t, c)
	if got, want := hook.got(), []sdk.TaskState{sdk.TaskStateWorking}; !slices.Equal(got, want) {
		t.Fatalf("the webhook took %v, want %v", got, want)
	}
	if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "could not be taken in time") {
		t.Fatalf("the end not posted is not warned of; the node's warnings:\n%s", l)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A node's end waiting for the lease of the task's notifications, which another
// node holds, is not posted once that node posted the end and recorded it
// (A2APushFinal): the wait reads the task's push stream again, and stops, the
// lease still held. Before, it waited until the other node's lease expired,
// then took it and posted the end again: the webhook took it twice.
func TestPushEndWaitingForTheLeaseStopsOnceAnotherNodePostedIt(t *testing.T) {
	hook, url := newLeaseHook(t, false)
	a, b, c := twoPushNodes(t, url)
	b.post(t, c, sdk.TaskStateWorking) // b takes the lease
	b.idle(t, c)
	a.post(t, c, sdk.TaskStateCompleted)
	time.Sleep(100 * time.Millisecond) // a's claim finds b's lease
	b.post(t, c, sdk.TaskStateCompleted)
	select {
	case <-b.finals:
	case <-time.After(20 * time.Second):
		t.Fatal("the other node's end was not posted within 20 s")
	}
	// a's clock moves past its last read (b's lease still holds): a reads the
	// stream again at its next ask.
	a.clock.Store(int64(2 * pushRefresh))
	stopped := false
	for deadline := time.Now().Add(5 * time.Second); !stopped && time.Now().Before(deadline); {
		stopped = !a.sender.busy(leaseTask, c)
		time.Sleep(5 * time.Millisecond)
	}
	// Then past b's lease.
	a.clock.Store(int64(pushLeaseTerm + time.Second))
	a.idle(t, c)
	if got, want := hook.got(), []sdk.TaskState{sdk.TaskStateWorking, sdk.TaskStateCompleted}; !slices.Equal(got, want) {
		t.Fatalf("the webhook took %v, want %v: the end was posted again", got, want)
	}
	if !stopped {
		t.Fatal("the end still waited for the other node's lease after it read that the end was posted")
	}
}

// downLog is a log whose appends fail while down is set.
type downLog struct {
	eventlog.Log
	down atomic.Bool
}

func (l *downLog) Append(ctx context.Context, events []messages.Envelope) error {
	if l.down.Load() {
		return errLogDown
	}
	return l.Log.Append(ctx, events)
}

var errLogDown = errors.New("the log is down")

// An end asking each second for the lease of the task's notifications while the
// log fails to write it warns of the first failure, then once a minute at most,
// with how many asks failed, and says so when an ask works again. Before, each
// ask warned: ten minutes of a log down were 600 warnings per end.
func TestPushLeaseFailuresAreWarnedOfOnceAMinute(t *testing.T) {
	ctx := context.Background()
	raw, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	log := &downLog{Log: raw}
	a := newPushNode(t, log)
	if _, err := a.store.Save(ctx, leaseTask, &sdk.PushConfig{ID: "c1", URL: "http://127.0.0.1:1/hook"}); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	a.store.logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	log.down.Store(true)
	asks := int(pushEndTimeout / pushLeasePoll)
	for i := range asks {
		a.clock.Store(int64(time.Duration(i) * pushLeasePoll))
		if ok, wait := a.store.lease(ctx, leaseTask, "c1", true, true); ok || wait != pushLeasePoll {
			t.Fatalf("ask %d with the log down: ok %v, wait %v", i, ok, wait)
		}
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if want := int(pushEndTimeout/pushLeaseWarnEvery) + 1; len(lines) > want {
		t.Fatalf("%d lines logged for %d failed asks, want %d at most:\n%s", len(lines), asks, want, strings.Join(lines[:min(len(lines), 5)], "\n"))
	}
	if last := lines[len(lines)-1]; !strings.Contains(last, "level=WARN") || !strings.Contains(last, "attempts=") {
		t.Fatalf("the last warning does not say how many asks failed: %s", last)
	}
	log.down.Store(false)
	a.clock.Store(int64(pushEndTimeout))
	if ok, _ := a.store.lease(ctx, leaseTask, "c1", true, true); !ok {
		t.Fatal("the lease is not taken once the log works again")
	}
	if l := logs.String(); !strings.Contains(l, "level=INFO") || !strings.Contains(l, fmt.Sprintf("failed=%d", asks)) {
		t.Fatalf("the ask that works again is not said with the failures before it:\n%s", l)
	}
}
