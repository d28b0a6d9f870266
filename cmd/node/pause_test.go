package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ThreeDotsLabs/watermill"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/clickhouse"
	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/messages"
)

// TestClusterPausedNodeIsFenced runs the crash test's cluster (two nodes with the
// sessions and models roles, one with sessions and the slow tool) on real Kafka and
// ClickHouse, and freezes one sessions node with SIGSTOP mid-run, for longer than
// the group's session timeout: Kafka evicts it and moves its partitions, whose new
// owners take a new ownership epoch and finish its sessions. Then it wakes up with
// SIGCONT, still believing it owns them, with effect answers queued and appends in
// flight. Its appends are fenced (refused, or hidden from Read if one slipped in
// between its check and its insert), so every session completes with one event at
// each seq, none lost, each effect performed once; and nothing it publishes on
// troupe.events after it woke differs from the log.
//
// n1 reaches ClickHouse through a network the test stalls (holdProxy; the other
// nodes and the test's own checks connect directly), and it freezes only once the
// network holds an append of its in flight: the writer's lookup, which checks the
// lease, or its INSERT. The network delivers them once the new owners took their
// epochs, just before n1 wakes, so that ClickHouse fences at least one append of
// n1 every time (unless n1 stays frozen longer than its sessions wait for an
// append, actors.Deps.IOTimeout, 30 s, where the group evicted it in 10). Before, n1 woke with appends in flight or not, as the freeze
// fell, and when it had none its sessions often stopped (their partitions
// revoked, or a session start or a call refused after the pause) before they
// appended anything: the run fenced no append, and proved nothing.
func TestClusterPausedNodeIsFenced(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and pauses node processes")
	}
	if os.Getenv("TROUPE_TEST_KAFKA") == "" || os.Getenv("TROUPE_TEST_CLICKHOUSE") == "" {
		t.Skip("TROUPE_TEST_KAFKA and TROUPE_TEST_CLICKHOUSE are not both set: a paused node must be evicted by a real Kafka group, " +
			"and ClickHouse is the log whose writes are not atomic with their fencing check (start them with deploy/services.sh up, as .ci/run does)")
	}
	dir := t.TempDir()
	env := newClusterEnv(t, dir)
	script, records, modelLog := threeRecordsScript(t, dir)
	const sessions = 100

	network := startHoldProxy(t, env.clickhouse)
	victimEnv := env
	victimEnv.clickhouse = network.Addr()
	victim := startClusterNode(t, victimEnv, "n1", "sessions,models", script, records, modelLog)
	// Registered after the node's own cleanup, so it runs first: a stopped process
	// would not act on the SIGTERM that cleanup sends, nor stop in time without
	// its log.
	t.Cleanup(func() {
		network.Release()
		_ = victim.cmd.Process.Signal(syscall.SIGCONT)
	})
	survivor := startClusterNode(t, env, "n2", "sessions,models", script, records, modelLog)
	third := startClusterNode(t, env, "n3", "sessions,tools", script, records, modelLog)
	waitOwned(t, victim, survivor, third)

	prefix := fmt.Sprintf("pause-%d-", time.Now().UnixNano())
	bus := watchEvents(t, env, prefix)
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = victim.post(t, fmt.Sprintf(`{"input":"record three things","session_id":"%s%03d"}`, prefix, i))
	}
	deadline := time.Now().Add(120 * time.Second)
	for len(countLines(t, records, "effect ")) < sessions {
		if time.Now().After(deadline) {
			t.Fatalf("tools never ran:\n%s", tail(victim.stderr.String(), 4000))
		}
		time.Sleep(5 * time.Millisecond)
	}
	victimEpoch := victim.gauge(t, "troupe_cluster_ownership_epoch")
	// The network between n1 and ClickHouse stalls as n1 sends its next append
	// there (the eventlog/clickhouse writer's INSERT, or its lookup, which checks
	// the lease, before each INSERT), and n1 freezes: the append waits in the
	// network, and so does anything n1 sends or is sent after it, until n1 wakes.
	network.HoldAt("INSERT INTO events (", "FROM appended")
	if !network.awaitHeld(30 * time.Second) {
		t.Fatal("n1 sent no append to ClickHouse within 30s; the test proves nothing")
	}
	if err := victim.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	log := env.openLog(t)
	defer log.Close()
	_, _, unfinished := recordedIn(t, log, ids)
	if unfinished == 0 {
		t.Fatal("the pause landed after every session had finished; the test proves nothing")
	}

	// The group evicts n1 after its session timeout; n2 and n3 take its partitions
	// under new epochs and go on with its sessions.
	waitFor(t, 120*time.Second, "n2 and n3 own every partition under epochs above n1's", func() bool {
		total, owned := survivor.gauge(t, "troupe_cluster_partitions_total"), 0
		for _, c := range []*child{survivor, third} {
			if c.gauge(t, "troupe_cluster_ownership_epoch") <= victimEpoch {
				return false
			}
			owned += c.gauge(t, "troupe_cluster_partitions_owned")
		}
		return total > 0 && owned == total
	})
	effects := len(countLines(t, records, "effect "))
	waitFor(t, 60*time.Second, "the new owners make progress", func() bool {
		return len(countLines(t, records, "effect ")) >= min(effects+10, 3*sessions)
	})
	// The network delivers what n1 had in flight, now that other nodes own its
	// partitions under higher epochs; then n1 runs again.
	held, heldUp, heldDown := network.Release()
	if !network.awaitPassed(10 * time.Second) {
		t.Fatal("the network did not pass on n1's requests to ClickHouse within 10s")
	}
	if err := victim.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	pause := time.Since(paused)

	waitCompleted(t, survivor, ids, "all recorded", 180*time.Second)
	// n1 woke up and rejoined; whatever it wrote meanwhile is in the log by now:
	// its fenced appends failed, and it appends nothing after it stopped them.
	fenced := victim.gauge(t, "troupe_cluster_fenced_appends_total")

	r := checkAfterKill(t, records, modelLog, nil, nil, 3*sessions)
	assertGapFree(t, log, ids)
	assertFolds(t, log, ids)
	stale := assertOneEventPerSeq(t, env, prefix)
	bus.assertMatches(t, log, ids)
	if fenced == 0 && stale == 0 {
		t.Fatal("n1 neither had an append fenced nor left a stale row after it woke up; the test proves nothing")
	}
	// The appends the network held: the log refused them (AppendLeased returned
	// ErrFenced, which n1 logs), or they landed as stale rows.
	refused := strings.Count(victim.stderr.String(), "append refused: another node owns the session's partition now")
	if refused == 0 && stale == 0 {
		t.Fatalf("the log refused none of n1's appends in flight, and none of them left a stale row (%d refusals of n1 counted, of calls or session starts; n1 paused %s); the test proves nothing",
			fenced, pause.Round(time.Second))
	}
	t.Logf("sessions %d, n1 paused %s with %d unfinished (epoch %d) and appends in flight on %d connections to ClickHouse (%d bytes held, %d of answers); "+
		"after SIGCONT: %d appends of n1 fenced (%d refused by the log), %d stale rows hidden from Read; "+
		"completed %d, side effects %d (duplicates %d), model calls re-issued %d, tool calls re-issued %d",
		sessions, pause.Round(time.Second), unfinished, victimEpoch, held, heldUp, heldDown, fenced, refused, stale,
		sessions, r.effects, r.duplicates, r.reissuedModel, r.reissuedTool)
}

// busEvents are the events of a test's sessions that nodes published on
// troupe.events: copies of what they appended, which live subscribers (SSE, node
// run, the sink) see.
type busEvents struct {
	mu   sync.Mutex
	seen map[string]map[uint64]map[string]bool // session, seq: distinct events
}

// watchEvents reads troupe.events from its start, in no consumer group, until the
// test ends, keeping the events of sessions named with prefix.
func watchEvents(t *testing.T, env clusterEnv, prefix string) *busEvents {
	t.Helper()
	sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{Brokers: strings.Split(env.brokers, ","),
		Topics: kafka.TopicLayout{Prefix: env.prefix, InitializeTopics: true}}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	msgs, err := sub.Subscribe(ctx, messages.TopicEvents)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	b := &busEvents{seen: map[string]map[uint64]map[string]bool{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range msgs {
			if e, err := messages.Unmarshal(m.Payload); err == nil && strings.HasPrefix(e.SessionID, prefix) {
				b.mu.Lock()
				if b.seen[e.SessionID] == nil {
					b.seen[e.SessionID] = map[uint64]map[string]bool{}
				}
				if b.seen[e.SessionID][e.Seq] == nil {
					b.seen[e.SessionID][e.Seq] = map[string]bool{}
				}
				b.seen[e.SessionID][e.Seq][eventKey(e)] = true
				b.mu.Unlock()
			}
			m.Ack()
		}
	}()
	t.Cleanup(func() {
		cancel()
		_ = sub.Close()
		<-done
	})
	return b
}

func eventKey(e messages.Envelope) string {
	return fmt.Sprintf("%s %s %d %s", e.ID, e.Type, e.TS, e.Payload)
}

// assertMatches waits until the bus carried every session's last event, then fails
// if any event published at a seq differs from the log's event there: a node that
// appended (or believed it did) beside the session's owner.
func (b *busEvents) assertMatches(t *testing.T, log eventlog.Log, ids []string) {
	t.Helper()
	want := map[string][]messages.Envelope{}
	for _, id := range ids {
		events, err := log.Read(context.Background(), id, 1)
		if err != nil {
			t.Fatal(err)
		}
		want[id] = events
	}
	missing := func() []string {
		b.mu.Lock()
		defer b.mu.Unlock()
		var out []string
		for id, events := range want {
			if len(events) == 0 {
				out = append(out, id+": no events in the log")
				continue
			}
			last := events[len(events)-1]
			if !b.seen[id][last.Seq][eventKey(last)] {
				// Which of the session's events never reached the bus, and whether
				// the bus has another event at the last seq: the diagnosis of a
				// batch the log kept but nobody published.
				var unseen []string
				for _, e := range events {
					if !b.seen[id][e.Seq][eventKey(e)] {
						unseen = append(unseen, fmt.Sprintf("%d %s (actor %s)", e.Seq, e.Type, e.Actor))
					}
				}
				out = append(out, fmt.Sprintf("%s: log ends at seq %d; %d other events published at that seq; never published: %s",
					id, last.Seq, len(b.seen[id][last.Seq]), strings.Join(unseen, ", ")))
			}
		}
		return out
	}
	deadline := time.Now().Add(60 * time.Second)
	for m := missing(); len(m) > 0; m = missing() {
		if time.Now().After(deadline) {
			t.Fatalf("not every session's last event reached troupe.events within 60s:\n%s", strings.Join(m, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, events := range want {
		for seq, published := range b.seen[id] {
			if seq == 0 || seq > uint64(len(events)) {
				t.Errorf("session %s: seq %d was published but the log ends at seq %d", id, seq, len(events))
				continue
			}
			logged := eventKey(events[seq-1])
			for p := range published {
				if p != logged {
					t.Errorf("session %s seq %d: published %.200s, the log holds %.200s", id, seq, p, logged)
				}
			}
		}
	}
}

// waitFor polls cond until it holds, or fails the test after within.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// assertFolds fails unless every session's events fold (as a session actor folds
// them) into a completed task in which every model call and tool call requested was
// answered exactly once: an event lost to another writer's at its seq shows here.
func assertFolds(t *testing.T, log eventlog.Log, ids []string) {
	t.Helper()
	want := map[messages.Type]int{messages.TypeTaskSubmitted: 1, messages.TypeModelRequested: 3, messages.TypeModelResponded: 3,
		messages.TypeToolCallRequested: 3, messages.TypeToolCallCompleted: 3, messages.TypeTaskCompleted: 1}
	for _, id := range ids {
		events, err := log.Read(context.Background(), id, 1)
		if err != nil {
			t.Fatal(err)
		}
		st := actors.NewSessionState(id)
		got := map[messages.Type]int{}
		answered := map[string]int{}
		for _, e := range events {
			if err := st.Apply(e); err != nil {
				t.Fatalf("session %s does not fold at seq %d: %v", id, e.Seq, err)
			}
			got[e.Type]++
			p, err := e.Decode()
			if err != nil {
				t.Fatal(err)
			}
			switch p := p.(type) {
			case *messages.ModelResponded:
				answered["model "+p.Key]++
			case *messages.ToolCallCompleted:
				answered["tool "+p.Key]++
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("session %s holds events %v, want %v", id, got, want)
		}
		for key, n := range answered {
			if n != 1 {
				t.Errorf("session %s answers %s %d times", id, key, n)
			}
		}
		if st.Active() != "" {
			t.Errorf("session %s has a task still running after its events", id)
		}
	}
}

// assertOneEventPerSeq reads the events table itself and fails if, at some seq of
// the test's sessions, Read could be given two different events: rows that differ
// (in ID, type, timestamp or payload) at the highest epoch written at that seq.
// (A database written before fencing has no epoch: every row counts then.) It
// returns how many rows Read hides: those of a lower epoch at a seq, and those
// eventlog.Superseded hides after a later owner's events.
func assertOneEventPerSeq(t *testing.T, env clusterEnv, prefix string) (hidden int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := ch.Open(&ch.Options{Addr: clickhouse.SplitAddr(env.clickhouse), Protocol: ch.Native, Auth: ch.Auth{Database: env.database}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var hasEpoch uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM system.columns WHERE database = ? AND table = 'events' AND name = 'epoch'", env.database).Scan(&hasEpoch); err != nil {
		t.Fatal(err)
	}
	epoch := "toUInt64(0)"
	if hasEpoch > 0 {
		epoch = "epoch"
	}
	rows, err := conn.Query(ctx, "SELECT session_id, seq, "+epoch+" AS e, id, type, ts, cityHash64(payload) FROM events WHERE startsWith(session_id, ?) ORDER BY session_id, seq, e DESC", prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	type key struct {
		session string
		seq     uint64
	}
	var (
		at      key
		top     uint64
		visible = map[string]bool{}
		before  = map[string]uint64{} // per session: the highest epoch Read returned
		skip    bool
	)
	for rows.Next() {
		var (
			k       key
			e, hash uint64
			id, typ string
			ts      int64
		)
		if err := rows.Scan(&k.session, &k.seq, &e, &id, &typ, &ts, &hash); err != nil {
			t.Fatal(err)
		}
		if k != at {
			at, top, visible = k, e, map[string]bool{}
			skip = eventlog.Superseded(e, before[k.session])
			if !skip {
				before[k.session] = max(before[k.session], e)
			}
		}
		if e < top || skip {
			hidden++
			continue
		}
		visible[fmt.Sprintf("%s %s %d %x", id, typ, ts, hash)] = true
		if len(visible) > 1 {
			t.Errorf("session %s seq %d holds %d different events at epoch %d: %v", k.session, k.seq, len(visible), e, visible)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return hidden
}
