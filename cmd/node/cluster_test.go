package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/clickhouse"
	"github.com/troupe-run/troupe/eventlog/clickhouse/chtest"
	"github.com/troupe-run/troupe/eventlog/sqlite"
)

// clusterEnv is where a cluster test's nodes meet: Kafka (real when TROUPE_TEST_KAFKA
// names it, else an in-process kfake broker the node processes reach over loopback),
// in a consumer group and on topics (--topic-prefix) of the test's own, and the event
// log they share (ClickHouse when TROUPE_TEST_CLICKHOUSE names it, in a database of
// the test's own, else one SQLite data directory).
type clusterEnv struct {
	brokers    string
	group      string
	prefix     string
	dataDir    string
	clickhouse string
	database   string
}

func newClusterEnv(t *testing.T, dir string) clusterEnv {
	t.Helper()
	now := time.Now().UnixNano()
	env := clusterEnv{dataDir: filepath.Join(dir, "data"), group: fmt.Sprintf("troupe-cluster-test-%d", now), prefix: fmt.Sprintf("t%d.", now)}
	if addr := os.Getenv("TROUPE_TEST_KAFKA"); addr != "" {
		env.brokers = addr
	} else {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(12))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		env.brokers = strings.Join(c.ListenAddrs(), ",")
	}
	if addr := os.Getenv("TROUPE_TEST_CLICKHOUSE"); addr != "" {
		env.clickhouse, env.database = addr, chtest.Database(t, addr, "troupe_cluster_")
	}
	return env
}

// openLog opens the shared log for the test's own checks.
func (e clusterEnv) openLog(t *testing.T) eventlog.Log {
	t.Helper()
	ctx := context.Background()
	var (
		l   eventlog.Log
		err error
	)
	if e.clickhouse != "" {
		l, err = clickhouse.Open(ctx, clickhouse.Config{Addr: clickhouse.SplitAddr(e.clickhouse), Database: e.database})
	} else {
		l, err = sqlite.Open(ctx, sqlite.Config{Dir: e.dataDir, ReadOnly: true})
	}
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// startClusterNode starts `node serve` in the cluster with the given roles.
func startClusterNode(t *testing.T, env clusterEnv, name, roles, script, records, modelLog string, extra ...string) *child {
	t.Helper()
	addr := freeAddr(t)
	args := []string{"serve", "--kafka", env.brokers, "--group", env.group, "--topic-prefix", env.prefix, "--node-id", name, "--roles", roles,
		"--data", env.dataDir, "--http", addr, "--model", "scripted:" + script}
	if env.clickhouse != "" {
		args = append(args, "--clickhouse", env.clickhouse)
	}
	args = append(args, extra...)
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "TROUPE_CRASH_CHILD=1", "TROUPE_RECORD_FILE="+records, "TROUPE_MODEL_LOG="+modelLog,
		"TROUPE_CHILD_CLICKHOUSE_DATABASE="+env.database)
	stderr := &syncBuffer{} // read while the node runs
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, addr: addr, stderr: stderr}
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			_ = c.cmd.Process.Signal(syscall.SIGTERM)
			_ = c.cmd.Wait()
		}
		if t.Failed() || os.Getenv("TROUPE_TEST_SHOW_NODE_LOGS") != "" {
			t.Logf("node %s stderr (tail):\n%s", name, tail(stderr.String(), 4000))
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			if err = startingAnswer(resp); err == nil {
				return c
			}
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatalf("node %s did not come up: %v\n%s", name, err, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitOwned waits until the nodes own all partitions between them, each some.
func waitOwned(t *testing.T, nodes ...*child) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		sum, each, total := 0, true, 0
		for _, c := range nodes {
			n := c.gauge(t, "troupe_cluster_partitions_owned")
			sum += n
			each = each && n > 0
			total = c.gauge(t, "troupe_cluster_partitions_total")
		}
		if each && sum == total {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the group did not settle: %d of %d partitions owned", sum, total)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// gauge reads one of the node's metrics.
func (c *child) gauge(t *testing.T, name string) int {
	t.Helper()
	resp, err := http.Get("http://" + c.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// TestClusterKillNine runs three `node serve` processes in one cluster: two run
// sessions and models, one runs sessions and the (slow) tool, so the other two call
// the tool over troupe.tool.requests, and it calls the models over
// troupe.model.requests. 100 sessions start; one agents node is killed with SIGKILL
// mid-run. Its partitions move to the other nodes, which fold the sessions from the
// shared log and finish them: every session completes, every tool side effect
// happens once, and no effect whose result was recorded is performed again.
func TestClusterKillNine(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills node processes")
	}
	dir := t.TempDir()
	env := newClusterEnv(t, dir)
	script, records, modelLog := threeRecordsScript(t, dir)
	const sessions = 100

	victim := startClusterNode(t, env, "n1", "sessions,models", script, records, modelLog)
	survivor := startClusterNode(t, env, "n2", "sessions,models", script, records, modelLog)
	third := startClusterNode(t, env, "n3", "sessions,tools", script, records, modelLog)
	// Start the work once the group settled: every node owns some of the 12 partitions.
	waitOwned(t, victim, survivor, third)

	prefix := fmt.Sprintf("cluster-%d-", time.Now().UnixNano())
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = victim.post(t, fmt.Sprintf(`{"input":"record three things","session_id":"%s%03d"}`, prefix, i))
	}
	// Kill n1 once the work is under way but far from done.
	deadline := time.Now().Add(120 * time.Second)
	for len(countLines(t, records, "effect ")) < sessions {
		if time.Now().After(deadline) {
			t.Fatalf("tools never ran:\n%s", tail(victim.stderr.String(), 4000))
		}
		time.Sleep(5 * time.Millisecond)
	}
	victim.kill9(t)

	log := env.openLog(t)
	defer log.Close()
	modelDone, toolDone, unfinished := recordedIn(t, log, ids)
	if unfinished == 0 {
		t.Fatal("the kill landed after every session had finished; the test proves nothing")
	}
	t.Logf("killed n1 with %d of %d sessions unfinished; %d model answers and %d tool results recorded", unfinished, sessions, len(modelDone), len(toolDone))

	waitCompleted(t, survivor, ids, "all recorded", 180*time.Second)

	r := checkAfterKill(t, records, modelLog, modelDone, toolDone, 3*sessions)
	if _, _, left := recordedIn(t, log, ids); left != 0 {
		t.Errorf("%d sessions unfinished in the log", left)
	}
	assertGapFree(t, log, ids)
	t.Logf("sessions %d, kills 1, completed %d, side effects %d (duplicates %d), re-issued after the kill: %d model calls, %d tool calls (unanswered at the kill, same keys)",
		sessions, sessions, r.effects, r.duplicates, r.reissuedModel, r.reissuedTool)
}

// TestTopicPrefixOptions: with --kafka, a topic prefix Kafka would refuse is a usage
// error, whether it comes from the flag, the environment or the config file's
// topic_prefix (in that order of precedence). A config file with a bad prefix is
// refused as it is read, whatever overrides it.
func TestTopicPrefixOptions(t *testing.T) {
	badConfig := filepath.Join(t.TempDir(), "troupe.json")
	if err := os.WriteFile(badConfig, []byte(`{"topic_prefix":"file/."}`), 0o644); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(t.TempDir(), "troupe.json")
	if err := os.WriteFile(config, []byte(`{"topic_prefix":"file."}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		env  string
		args []string
		want string
	}{
		{"", []string{"--topic-prefix", "bad prefix."}, `invalid topic name: topic prefix "bad prefix."`},
		{"env/.", nil, `topic prefix "env/."`},
		{"", []string{"--config", badConfig}, `topic_prefix: kafka: invalid topic name: topic prefix "file/."`},
		{"env/.", []string{"--config", badConfig}, `topic prefix "file/."`},
		{"env/.", []string{"--config", config}, `topic prefix "env/."`},
		{"env/.", []string{"--config", config, "--topic-prefix", "flag/."}, `topic prefix "flag/."`},
	} {
		t.Setenv("TROUPE_KAFKA_TOPIC_PREFIX", c.env)
		var out, errb bytes.Buffer
		args := append([]string{"serve", "--model", "offline", "--data", t.TempDir(), "--kafka", "127.0.0.1:1"}, c.args...)
		if code := run(context.Background(), args, &out, &errb, options{}); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("env %q, %v: exit %d, stderr %q; want 2 and %q", c.env, c.args, code, errb.String(), c.want)
		}
	}
}

// TestRunOnACluster: `node run --kafka` submits its task to the cluster and follows it
// to the answer, running nothing itself (its own log stays empty) and joining no
// consumer group (the serving node keeps all its partitions).
func TestRunOnACluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node process")
	}
	dir := t.TempDir()
	env := newClusterEnv(t, dir)
	script := filepath.Join(dir, "script.json")
	if err := os.WriteFile(script, []byte(`{"name":"scripted","steps":[{"tool_calls":[{"id":"a","name":"record","arguments":"{}"}]},{"content":"all recorded"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	records, modelLog := filepath.Join(dir, "records.txt"), filepath.Join(dir, "model.txt")
	server := startClusterNode(t, env, "n1", "all", script, records, modelLog)
	waitOwned(t, server)
	owned := server.gauge(t, "troupe_cluster_partitions_owned")
	assignments := server.gauge(t, "troupe_cluster_assignments_total")

	runDir := filepath.Join(dir, "run-data")
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := []string{"run", "--kafka", env.brokers, "--group", env.group, "--topic-prefix", env.prefix, "--data", runDir, "--model", "offline", "record something"}
	if code := run(ctx, args, &out, &errb, options{}); code != 0 {
		t.Fatalf("node run exited %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "answer: all recorded") || !strings.Contains(out.String(), "a node of the cluster runs it") {
		t.Fatalf("stdout:\n%s", out.String())
	}
	// Had the run joined the group, the server would have been assigned partitions
	// again when it joined and when it left; give such rebalances time to show.
	time.Sleep(3 * time.Second)
	if n := server.gauge(t, "troupe_cluster_assignments_total"); n != assignments {
		t.Errorf("the serving node was assigned partitions %d times during the run: the run joined the group", n-assignments)
	}
	if n := server.gauge(t, "troupe_cluster_partitions_owned"); n != owned {
		t.Errorf("the serving node owns %d partitions after the run, %d before", n, owned)
	}
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: runDir, ReadOnly: true})
	if err == nil {
		defer lg.Close()
		if infos, err := lg.Sessions(context.Background(), eventlog.Filter{}); err != nil || len(infos) != 0 {
			t.Errorf("the run's own log holds %d sessions (%v): it ran the task itself", len(infos), err)
		}
	}
}

// TestRunOnAClusterFollowsAnInstantTask: a task the cluster finishes at once (one
// model call, no tool) is followed to its answer by `node run --kafka`, every time:
// the run reads the events topic from where it ended before it submitted the task,
// so none of the task's events can come before the run started reading.
func TestRunOnAClusterFollowsAnInstantTask(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node process")
	}
	dir := t.TempDir()
	env := newClusterEnv(t, dir)
	script := filepath.Join(dir, "script.json")
	if err := os.WriteFile(script, []byte(`{"name":"scripted","steps":[{"content":"at once"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	server := startClusterNode(t, env, "n1", "all", script, filepath.Join(dir, "records.txt"), filepath.Join(dir, "model.txt"))
	waitOwned(t, server)
	for i := range 5 {
		var out, errb bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		args := []string{"run", "--kafka", env.brokers, "--group", env.group, "--topic-prefix", env.prefix,
			"--data", filepath.Join(dir, fmt.Sprintf("run-%d", i)), "--model", "offline", "be quick"}
		code := run(ctx, args, &out, &errb, options{})
		cancel()
		if code != 0 || !strings.Contains(out.String(), "answer: at once") {
			t.Fatalf("run %d: exit %d\nstdout:\n%s\nstderr:\n%s", i, code, out.String(), errb.String())
		}
	}
}

// TestTopicsFile: --topics creates the topics with the file's layout (here 5
// partitions for troupe.tasks), and a malformed file is a usage error.
func TestTopicsFile(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node process")
	}
	dir := t.TempDir()
	env := newClusterEnv(t, dir)
	layout := filepath.Join(dir, "topics.txt")
	if err := os.WriteFile(layout, []byte("# name partitions replication retention_ms\ntroupe.tasks 5 1 86400000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "script.json")
	if err := os.WriteFile(script, []byte(`{"steps":[{"content":"ok"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	n := startClusterNode(t, env, "n1", "all", script, filepath.Join(dir, "r.txt"), filepath.Join(dir, "m.txt"), "--topics", layout)
	waitOwned(t, n)
	if total := n.gauge(t, "troupe_cluster_partitions_total"); total != 5 {
		t.Fatalf("troupe.tasks has %d partitions, want the file's 5", total)
	}

	bad := filepath.Join(dir, "bad.txt")
	if err := os.WriteFile(bad, []byte("troupe.tasks five 1 -1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"serve", "--kafka", env.brokers, "--topics", bad}, &out, &errb, options{})
	if code != 2 || !strings.Contains(errb.String(), "topics line 1") {
		t.Fatalf("malformed topics file: exit %d, stderr %q", code, errb.String())
	}
}
