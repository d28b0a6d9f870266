package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/clickhouse"
	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/messages"
)

// The tests here run two `node serve` processes on real Kafka and ClickHouse and
// produce their tasks with kcat in its default settings (librdkafka's CRC32
// partitioner, so most records land on a partition other than their session's and
// are forwarded). Sessions that are new start by claiming the session
// (eventlog.Claiming under the partition's lease) rather than by reading it; these
// tests kill the owner of such sessions with SIGKILL, and check that its partitions'
// next owner neither loses nor repeats anything, and reads (rather than claims
// over) a session that only the dead node ran.

// clusterServices skips the test unless real Kafka and ClickHouse are named and
// kcat is installed, and returns kcat's path.
func clusterServices(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts and kills node processes")
	}
	if os.Getenv("TROUPE_TEST_KAFKA") == "" || os.Getenv("TROUPE_TEST_CLICKHOUSE") == "" {
		t.Skip("TROUPE_TEST_KAFKA and TROUPE_TEST_CLICKHOUSE are not both set (start them with deploy/services.sh up, as .ci/run does)")
	}
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("kcat is not installed (.ci/run installs it from Debian's kcat package)")
	}
	return kcat
}

// oneRecordScript writes a model script into dir for tasks that call the record
// tool once and answer "recorded", and returns it with the paths of the record
// tool's file and the model's call log.
func oneRecordScript(t *testing.T, dir string) (script, records, modelLog string) {
	t.Helper()
	script = filepath.Join(dir, "script.json")
	if err := os.WriteFile(script, []byte(`{"name":"scripted","steps":[
		{"tool_calls":[{"id":"a","name":"record","arguments":"{}"}]},
		{"content":"recorded"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return script, filepath.Join(dir, "records.txt"), filepath.Join(dir, "model.txt")
}

// kcatPublish produces lines on the cluster's troupe.tasks with kcat's default
// partitioner and the extra arguments (-k KEY, -K DELIM), one record per line, in
// order.
func kcatPublish(t *testing.T, kcat string, env clusterEnv, extra []string, lines ...string) {
	t.Helper()
	args := append([]string{"-b", env.brokers, "-P", "-t", env.prefix + messages.TopicTasks}, extra...)
	cmd := exec.Command(kcat, args...)
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kcat %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// clickhouseConn opens the cluster's ClickHouse database for queries of the tables
// themselves.
func clickhouseConn(t *testing.T, env clusterEnv) ch.Conn {
	t.Helper()
	conn, err := ch.Open(&ch.Options{Addr: clickhouse.SplitAddr(env.clickhouse), Protocol: ch.Native, Auth: ch.Auth{Database: env.database}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// ownerOf returns the node that took partition of troupe.tasks last (its current
// owner once the group settled), from the log's ownership table.
func ownerOf(t *testing.T, conn ch.Conn, partition int) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var node string
	for {
		// A node says it owns a partition (its gauge) as it is assigned it, and
		// records the ownership in the log right after, in the background.
		err := conn.QueryRow(ctx, "SELECT node FROM ownership WHERE partition = ? ORDER BY epoch DESC LIMIT 1", uint32(partition)).Scan(&node)
		if err == nil {
			return node
		}
		if !errors.Is(err, sql.ErrNoRows) || ctx.Err() != nil {
			t.Fatalf("owner of partition %d: %v", partition, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// assertNothingShadowed reads the events table itself and fails if it holds an
// event of the test's sessions (prefix) that Read does not return: an event some
// node wrote and the session's next writer did not fold, writing another event at
// its seq under a higher epoch (or after it, hiding it). A row hidden from Read
// that is an event Read returns (the same ID at the same seq: an INSERT retried)
// is not lost. It returns how many rows the table holds for those sessions.
func assertNothingShadowed(t *testing.T, conn ch.Conn, log eventlog.Log, prefix string) (rows int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	owners := map[uint64]string{}
	orows, err := conn.Query(ctx, "SELECT DISTINCT epoch, node FROM ownership")
	if err != nil {
		t.Fatal(err)
	}
	for orows.Next() {
		var (
			epoch uint64
			node  string
		)
		if err := orows.Scan(&epoch, &node); err != nil {
			t.Fatal(err)
		}
		owners[epoch] = node
	}
	orows.Close()
	r, err := conn.Query(ctx, "SELECT session_id, seq, epoch, id, type FROM events WHERE startsWith(session_id, ?) ORDER BY session_id, seq, epoch", prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	visible := map[string]map[string]uint64{} // session: event ID: seq
	for r.Next() {
		var (
			session, id, typ string
			seq, epoch       uint64
		)
		if err := r.Scan(&session, &seq, &epoch, &id, &typ); err != nil {
			t.Fatal(err)
		}
		rows++
		if visible[session] == nil {
			events, err := log.Read(ctx, session, 1)
			if err != nil {
				t.Fatal(err)
			}
			visible[session] = map[string]uint64{}
			for _, e := range events {
				visible[session][e.ID] = e.Seq
			}
		}
		if at, ok := visible[session][id]; !ok || at != seq {
			t.Errorf("session %s: event %s (%s) at seq %d, written by node %q under epoch %d, is shadowed: Read does not return it there (the next writer did not fold it)",
				session, id, typ, seq, owners[epoch], epoch)
		}
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

// claimsRefused stops c (SIGTERM) and returns, by session of the test's (prefix),
// how often its log says that a claim of the session was refused and the session
// read its events instead (c runs with -v).
func claimsRefused(t *testing.T, c *child, prefix string) map[string]int {
	t.Helper()
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	_ = c.cmd.Wait()
	out := map[string]int{}
	for _, line := range strings.Split(c.stderr.String(), "\n") {
		if !strings.Contains(line, `msg="session has events: reading them before its new task"`) {
			continue
		}
		if _, id, ok := strings.Cut(line, " session="); ok && strings.HasPrefix(id, prefix) {
			id, _, _ = strings.Cut(id, " ")
			out[id]++
		}
	}
	return out
}

// taskInputs returns the inputs of a session's tasks, in the order they were
// recorded.
func taskInputs(t *testing.T, evs []messages.Envelope) []string {
	t.Helper()
	var out []string
	for _, e := range evs {
		if e.Type != messages.TypeTaskSubmitted {
			continue
		}
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p.(*messages.TaskSubmitted).Input)
	}
	return out
}

// waitTasksEnded waits until each session's log holds want[session] ended tasks,
// and reports whether they did within the time given (failing the test if not).
func waitTasksEnded(t *testing.T, log eventlog.Log, want map[string]int, within time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(within)
	for id, n := range want {
		for {
			evs, err := log.Read(context.Background(), id, 1)
			if err != nil {
				t.Fatal(err)
			}
			_, ended, _ := tasksOf(t, evs)
			if len(ended) >= n {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("session %s: %d of %d tasks ended within %s", id, len(ended), n, within)
				return false
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return true
}

// assertTasksInOrder fails unless the session recorded exactly inputs as its
// tasks, in that order, and each ended once, completed with "recorded", in the
// order recorded.
func assertTasksInOrder(t *testing.T, log eventlog.Log, id string, inputs []string) {
	t.Helper()
	evs, err := log.Read(context.Background(), id, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := taskInputs(t, evs); !slices.Equal(got, inputs) {
		t.Errorf("session %s recorded the tasks %v, want %v (published in that order)", id, got, inputs)
		return
	}
	submitted, ended, outputs := tasksOf(t, evs)
	if !slices.Equal(ended, submitted) {
		t.Errorf("session %s: tasks ended in the order %v, want %v (the order recorded)", id, ended, submitted)
	}
	for _, task := range ended {
		if outputs[task] != "recorded" {
			t.Errorf("session %s: task %s answered %q", id, task, outputs[task])
		}
	}
}

// assertEffectsOnce fails unless the record tool performed want distinct side
// effects, each once, and no model or tool call whose result the log held at the
// kill (modelDone, toolDone) was made again.
func assertEffectsOnce(t *testing.T, records, modelLog string, modelDone, toolDone map[string]bool, want int) (reissuedModel, reissuedTool int) {
	t.Helper()
	modelCalls, toolCalls, effects := countLines(t, modelLog, ""), countLines(t, records, "call "), countLines(t, records, "effect ")
	if len(effects) != want {
		t.Errorf("%d distinct side effects, want %d (one per task)", len(effects), want)
	}
	for key, n := range effects {
		if n != 1 {
			t.Errorf("side effect %s happened %d times", key, n)
		}
	}
	for key := range modelDone {
		if modelCalls[key] != 1 {
			t.Errorf("model call %s had a recorded answer before the kill but was made %d times", key, modelCalls[key])
		}
	}
	for key := range toolDone {
		if toolCalls[key] != 1 {
			t.Errorf("tool call %s had a recorded result before the kill but ran %d times", key, toolCalls[key])
		}
	}
	for _, n := range modelCalls {
		reissuedModel += n - 1
	}
	for _, n := range toolCalls {
		reissuedTool += n - 1
	}
	return reissuedModel, reissuedTool
}

// TestClusterKillNineWithKcatTasksQueuedOnOneSession: two nodes; kcat publishes 20
// tasks for one new session, and three each for four other new sessions; the node
// that owns the queued session is killed with SIGKILL while it works through the
// queue, just after kcat published 5 more for it and tasks for four more new
// sessions, and kcat publishes its last 5 and tasks for four more new sessions
// before its partitions move (their next owner may read them before it resumes
// the session, and then claims it, which the log must refuse). The other node takes its partitions and finishes: every task completes
// once, in the order published, per session; every side effect happens once, and
// no call whose result was recorded is made again; each session's seqs run 1, 2,
// 3, … with one event at each; and no event of the dead node is hidden from Read
// without its successor having folded it.
func TestClusterKillNineWithKcatTasksQueuedOnOneSession(t *testing.T) {
	kcat := clusterServices(t)
	dir := t.TempDir()
	env := newClusterEnv(t, dir)
	script, records, modelLog := oneRecordScript(t, dir)
	t.Setenv("TROUPE_MODEL_DELAY", "30ms") // so that the queue takes a while
	const queued, others, each = 30, 4, 3

	nodes := map[string]*child{
		"n1": startClusterNode(t, env, "n1", "all", script, records, modelLog, "-v"),
		"n2": startClusterNode(t, env, "n2", "all", script, records, modelLog, "-v"),
	}
	waitOwned(t, nodes["n1"], nodes["n2"])
	total := nodes["n1"].gauge(t, "troupe_cluster_partitions_total")
	conn := clickhouseConn(t, env)

	prefix := fmt.Sprintf("cq-%d-", time.Now().UnixNano())
	hot := prefix + "hot"
	owner := ownerOf(t, conn, kafka.PartitionOf(hot, total))
	victim, survivor := nodes[owner], nodes["n1"]
	if owner == "n1" {
		survivor = nodes["n2"]
	}
	if victim == nil {
		t.Fatalf("partition %d of session %s is owned by %q", kafka.PartitionOf(hot, total), hot, owner)
	}

	inputs := map[string][]string{}
	// publishQueued publishes the queued session's next count tasks.
	publishQueued := func(count int) {
		var lines []string
		for range count {
			in := fmt.Sprintf("%s t%02d", hot, len(inputs[hot]))
			inputs[hot] = append(inputs[hot], in)
			lines = append(lines, fmt.Sprintf(`{"input":%q}`, in))
		}
		kcatPublish(t, kcat, env, []string{"-k", hot}, lines...)
	}
	publishQueued(queued - 10)
	ids := []string{hot}
	// publishOthers publishes each tasks for count new sessions named after batch.
	publishOthers := func(batch string, count int) {
		var lines []string
		for s := range count {
			id := fmt.Sprintf("%s%s%d", prefix, batch, s)
			ids = append(ids, id)
			for i := range each {
				inputs[id] = append(inputs[id], fmt.Sprintf("%s t%02d", id, i))
				lines = append(lines, fmt.Sprintf(`%s|{"input":%q}`, id, inputs[id][i]))
			}
		}
		kcatPublish(t, kcat, env, []string{"-K", "|"}, lines...)
	}
	publishOthers("early", others)

	log := env.openLog(t)
	defer log.Close()
	// Kill the owner once it has worked through part of the queue, with other new
	// sessions just published (some claimed on it, some not yet read), and more
	// published while its partitions have no owner.
	if !waitTasksEnded(t, log, map[string]int{hot: 5}, 120*time.Second) {
		t.FailNow()
	}
	publishQueued(5)
	publishOthers("before", others)
	victim.kill9(t)
	publishQueued(5)
	publishOthers("after", others)
	evs, err := log.Read(context.Background(), hot, 1)
	if err != nil {
		t.Fatal(err)
	}
	submitted, ended, _ := tasksOf(t, evs)
	if len(ended) == queued {
		t.Fatal("every queued task ended before the kill; the test proves nothing")
	}
	modelDone, toolDone, unfinished := recordedIn(t, log, ids)
	t.Logf("killed %s (owner of %s) with %d of %d queued tasks recorded, %d ended; %d of %d sessions unfinished",
		owner, hot, len(submitted), queued, len(ended), unfinished, len(ids))

	want := map[string]int{}
	for _, id := range ids {
		want[id] = len(inputs[id])
	}
	if !waitTasksEnded(t, log, want, 180*time.Second) {
		// Why: an event the survivor hid instead of folding it.
		assertNothingShadowed(t, conn, log, prefix)
		t.FailNow()
	}

	for _, id := range ids {
		assertTasksInOrder(t, log, id, inputs[id])
	}
	rm, rt := assertEffectsOnce(t, records, modelLog, modelDone, toolDone, queued+3*others*each)
	assertGapFree(t, log, ids)
	hidden := assertOneEventPerSeq(t, env, prefix)
	rows := assertNothingShadowed(t, conn, log, prefix)
	if n := survivor.gauge(t, "troupe_cluster_partitions_owned"); n != total {
		t.Errorf("the survivor owns %d of %d partitions", n, total)
	}
	refused := claimsRefused(t, survivor, prefix)
	t.Logf("tasks %d (%d queued on one session), all completed once in order; side effects %d; re-issued after the kill: %d model calls, %d tool calls; rows %d, hidden from Read %d (each folded); survivor's claims refused (it read the session): %v",
		queued+3*others*each, queued, queued+3*others*each, rm, rt, rows, hidden, refused)
}

// TestClusterTaskForADeadNodesSession: sessions run a task each to its end on one
// node, which is then killed with SIGKILL; tasks published for them afterwards run
// on the other node, which never ran them. Half are published while the dead node's
// partitions have no owner, so that the other node reads them as it takes the
// partitions, racing its resumption of their lately ended sessions: a task that
// comes first starts its session by claiming it, and the log must refuse the claim
// (the session has events, of an older epoch). Half are published once it took
// them. Either way the node must read each session's events and record the task
// after them, not claim the session over them, which would hide them from Read.
func TestClusterTaskForADeadNodesSession(t *testing.T) {
	kcat := clusterServices(t)
	dir := t.TempDir()
	env := newClusterEnv(t, dir)
	script, records, modelLog := oneRecordScript(t, dir)
	victim := startClusterNode(t, env, "n1", "all", script, records, modelLog)
	survivor := startClusterNode(t, env, "n2", "all", script, records, modelLog, "-v")
	waitOwned(t, victim, survivor)
	total := victim.gauge(t, "troupe_cluster_partitions_total")
	conn := clickhouseConn(t, env)

	// Sessions of n1's partitions.
	const sessions = 6
	prefix := fmt.Sprintf("cqdead-%d-", time.Now().UnixNano())
	var ids, lines []string
	for i := 0; len(ids) < sessions; i++ {
		if id := fmt.Sprintf("%s%d", prefix, i); ownerOf(t, conn, kafka.PartitionOf(id, total)) == "n1" {
			ids = append(ids, id)
			lines = append(lines, id+`|{"input":"first"}`)
		}
	}
	kcatPublish(t, kcat, env, []string{"-K", "|"}, lines...)
	log := env.openLog(t)
	defer log.Close()
	want := map[string]int{}
	for _, id := range ids {
		want[id] = 1
	}
	if !waitTasksEnded(t, log, want, 120*time.Second) {
		t.FailNow()
	}
	first := map[string][]messages.Envelope{}
	for _, id := range ids {
		evs, err := log.Read(context.Background(), id, 1)
		if err != nil {
			t.Fatal(err)
		}
		first[id] = evs
	}

	second := func(ids []string) {
		var lines []string
		for _, id := range ids {
			lines = append(lines, id+`|{"input":"second"}`)
		}
		kcatPublish(t, kcat, env, []string{"-K", "|"}, lines...)
	}
	victim.kill9(t)
	second(ids[:sessions/2])
	waitFor(t, 120*time.Second, "n2 owns every partition", func() bool {
		return survivor.gauge(t, "troupe_cluster_partitions_owned") == total
	})
	second(ids[sessions/2:])

	// Wait for each second task's end, whatever Read still shows of the first.
	for _, id := range ids {
		waitFor(t, 120*time.Second, "the second task of "+id+" ended", func() bool {
			evs, err := log.Read(context.Background(), id, 1)
			if err != nil {
				t.Fatal(err)
			}
			_, ended, _ := tasksOf(t, evs)
			inputs := taskInputs(t, evs)
			return len(ended) == len(inputs) && slices.Contains(inputs, "second")
		})
	}
	for _, id := range ids {
		assertTasksInOrder(t, log, id, []string{"first", "second"})
		events, err := log.Read(context.Background(), id, 1)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range first[id] {
			if i >= len(events) || events[i].ID != e.ID {
				t.Errorf("session %s: the first task's event at seq %d (%s) is not at its seq after the second task: replaced", id, e.Seq, e.Type)
				break
			}
		}
		if n := len(first[id]); n < len(events) && events[n].Type != messages.TypeTaskSubmitted {
			t.Errorf("session %s: seq %d after the first task holds %s, want the second task", id, events[n].Seq, events[n].Type)
		}
	}
	assertEffectsOnce(t, records, modelLog, nil, nil, 2*sessions)
	assertGapFree(t, log, ids)
	if hidden := assertOneEventPerSeq(t, env, prefix); hidden != 0 {
		t.Errorf("%d rows of the sessions are hidden from Read", hidden)
	}
	rows := assertNothingShadowed(t, conn, log, prefix)
	refused := claimsRefused(t, survivor, prefix)
	t.Logf("%d sessions of n1, a task each before the kill and one after; %d rows; n2's claims refused (the session read instead): %d of %d sessions",
		sessions, rows, len(refused), sessions)
}
