package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// TestClusterRollingRestart rolls a three-node cluster as a deploy does: the cluster
// of TestClusterKillNine (two nodes run sessions and models, one sessions and the
// slow tool, so tool and model calls cross the bus) runs 100 sessions, and each node
// in turn is stopped with SIGTERM, must exit 0 within its stop budget, is started
// again under its name and waited for until the group settled with it. The sessions
// start in three waves, one before each stop once its tool calls began, so that every
// stop, the tools node's too, lands with calls in flight. A stop lets the calls in
// flight answer (node.Config.HandoffGrace) and records them, so, stronger than after
// a kill -9: every session completes once, every tool side effect happens once, and
// no model or tool call is made a second time. Each session's seqs run 1, 2, 3, …,
// and each task has a completed result on troupe.results (at least once: a result
// may come more than once, README).
func TestClusterRollingRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and stops node processes")
	}
	dir := t.TempDir()
	env := newClusterEnv(t, dir)
	script, records, modelLog := threeRecordsScript(t, dir)
	const sessions = 100
	const stopBudget = time.Minute
	// Model calls that take a while too (the tool takes 150 ms), so that each stop
	// finds some in flight; well within HandoffGrace (5 s).
	t.Setenv("TROUPE_MODEL_DELAY", "200ms")

	type member struct{ name, roles string }
	members := []member{{"n1", "sessions,models"}, {"n2", "sessions,models"}, {"n3", "sessions,tools"}}
	nodes := make([]*child, len(members))
	for i, m := range members {
		nodes[i] = startClusterNode(t, env, m.name, m.roles, script, records, modelLog)
	}
	waitOwned(t, nodes...)

	log := env.openLog(t)
	defer log.Close()
	prefix := fmt.Sprintf("rolling-%d-", time.Now().UnixNano())
	var ids []string
	var unfinishedAt []int
	for i, m := range members {
		// A wave of sessions, posted to a node that stays up, and the stop once
		// their tools are under way but far from done.
		wave := prefix + strconv.Itoa(i) + "-"
		n := sessions / len(members)
		if i == 0 {
			n += sessions % len(members)
		}
		waveIDs := make([]string, n)
		for j := range waveIDs {
			waveIDs[j] = nodes[(i+1)%len(nodes)].post(t, fmt.Sprintf(`{"input":"record three things","session_id":"%s%03d"}`, wave, j))
		}
		ids = append(ids, waveIDs...)
		deadline := time.Now().Add(120 * time.Second)
		for effectsOf(t, records, wave) < n {
			if time.Now().After(deadline) {
				t.Fatalf("the tools of wave %d never ran", i)
			}
			time.Sleep(5 * time.Millisecond)
		}
		_, _, unfinished := recordedIn(t, log, waveIDs)
		if unfinished == 0 {
			t.Fatalf("the stop of %s landed after every session of its wave had finished; the test proves nothing", m.name)
		}
		unfinishedAt = append(unfinishedAt, unfinished)
		nodes[i].sigterm(t, stopBudget)
		nodes[i] = startClusterNode(t, env, m.name, m.roles, script, records, modelLog)
		waitOwned(t, nodes...)
	}
	t.Logf("stopped n1, n2, n3 in turn with %v of their waves' sessions unfinished", unfinishedAt)

	waitCompleted(t, nodes[0], ids, "all recorded", 180*time.Second)
	if _, _, left := recordedIn(t, log, ids); left != 0 {
		t.Errorf("%d sessions unfinished in the log", left)
	}
	completed := completedOnce(t, log, ids)
	r := checkAfterKill(t, records, modelLog, nil, nil, 3*sessions)
	for what, calls := range map[string]map[string]int{"model": countLines(t, modelLog, ""), "tool": countLines(t, records, "call ")} {
		for key, n := range calls {
			if n != 1 {
				t.Errorf("%s call %s was made %d times; after graceful stops, want once", what, key, n)
			}
		}
	}
	assertGapFree(t, log, ids)
	results, again := resultsOnce(t, env, ids)
	t.Logf("sessions %d, SIGTERM restarts 3, completed %d, side effects %d (duplicates %d), re-issued %d model calls and %d tool calls; troupe.results: %d records, %d tasks' results twice or more",
		sessions, completed, r.effects, r.duplicates, r.reissuedModel, r.reissuedTool, results, again)
}

// effectsOf counts the tool side effects of the sessions whose IDs start with prefix.
func effectsOf(t *testing.T, records, prefix string) int {
	t.Helper()
	n := 0
	for key := range countLines(t, records, "effect ") {
		if strings.HasPrefix(key, prefix) {
			n++
		}
	}
	return n
}

// completedOnce fails unless each session's log holds exactly one task.completed,
// and returns how many do.
func completedOnce(t *testing.T, log eventlog.Log, ids []string) int {
	t.Helper()
	once := 0
	for _, id := range ids {
		evs, err := log.Read(context.Background(), id, 1)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range evs {
			if e.Type == messages.TypeTaskCompleted {
				n++
			}
		}
		if n != 1 {
			t.Errorf("session %s completed %d times in the log", id, n)
			continue
		}
		once++
	}
	return once
}

// resultsOnce waits until troupe.results holds a completed result, "all recorded",
// for the one task of each session, and fails unless it comes to that within a
// minute or a session has results of more than one task. It returns the records
// of the sessions, and how many tasks have more than one (a result may come again:
// consumers dedupe by task_id).
func resultsOnce(t *testing.T, env clusterEnv, ids []string) (records, again int) {
	t.Helper()
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	deadline := time.Now().Add(time.Minute)
	for {
		tasks := map[string]map[string]int{} // session → task_id → completed results
		records = 0
		eachResult(t, env, func(r messages.TaskResult) {
			if !want[r.SessionID] {
				return
			}
			records++
			if r.Status != messages.StatusCompleted || r.Output != "all recorded" {
				t.Errorf("session %s: result %+v", r.SessionID, r)
				return
			}
			if tasks[r.SessionID] == nil {
				tasks[r.SessionID] = map[string]int{}
			}
			tasks[r.SessionID][r.TaskID]++
		})
		if len(tasks) == len(ids) {
			again = 0
			for id, byTask := range tasks {
				if len(byTask) != 1 {
					t.Errorf("session %s has results of %d tasks on troupe.results, want 1: %v", id, len(byTask), byTask)
				}
				for _, n := range byTask {
					if n > 1 {
						again++
					}
				}
			}
			return records, again
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d sessions have a completed result on troupe.results", len(tasks), len(ids))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// eachResult calls f with each result on the cluster's troupe.results, from every
// partition's start up to its end offset as the broker reports it now.
func eachResult(t *testing.T, env clusterEnv, f func(messages.TaskResult)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	brokers := strings.Split(env.brokers, ",")
	topic := env.prefix + messages.TopicResults
	conn, err := kgo.DialContext(ctx, "tcp", brokers[0])
	if err != nil {
		t.Fatal(err)
	}
	parts, err := conn.ReadPartitions(topic)
	conn.Close()
	if err != nil {
		return // not created yet
	}
	for _, p := range parts {
		pc, err := kgo.DialLeader(ctx, "tcp", brokers[0], topic, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		end, err := pc.ReadLastOffset()
		pc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if end == 0 {
			continue
		}
		r := kgo.NewReader(kgo.ReaderConfig{Brokers: brokers, Topic: topic, Partition: p.ID, MaxWait: 50 * time.Millisecond})
		for {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				r.Close()
				t.Fatalf("partition %d of %s, before offset %d: %v", p.ID, topic, end, err)
			}
			var res messages.TaskResult
			if err := json.Unmarshal(m.Value, &res); err != nil {
				t.Fatalf("a record of %s: %v: %q", topic, err, m.Value)
			}
			f(res)
			if m.Offset+1 >= end {
				break
			}
		}
		r.Close()
	}
}
