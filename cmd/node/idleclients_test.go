package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/messages"
)

// brokerIdleTimeout returns the broker's connections.max.idle.ms, as it reports it.
func brokerIdleTimeout(t *testing.T, brokers string) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	addr := strings.Split(brokers, ",")[0]
	conn, err := kgo.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ctrl, err := conn.Controller()
	conn.Close()
	if err != nil {
		t.Fatal(err)
	}
	c := &kgo.Client{Addr: kgo.TCP(addr), Transport: &kgo.Transport{}}
	resp, err := c.DescribeConfigs(ctx, &kgo.DescribeConfigsRequest{Resources: []kgo.DescribeConfigRequestResource{{
		ResourceType: kgo.ResourceTypeBroker, ResourceName: strconv.Itoa(ctrl.ID), ConfigNames: []string{"connections.max.idle.ms"}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp.Resources {
		for _, e := range r.ConfigEntries {
			if e.ConfigName == "connections.max.idle.ms" {
				ms, err := strconv.Atoi(e.ConfigValue)
				if err != nil {
					t.Fatalf("connections.max.idle.ms %q: %v", e.ConfigValue, err)
				}
				return time.Duration(ms) * time.Millisecond
			}
		}
	}
	t.Fatal("the broker did not report connections.max.idle.ms")
	return 0
}

// warnAndErrorLines returns the lines of a node's stderr at level WARN or ERROR.
func warnAndErrorLines(s string) (warn, errs []string) {
	for _, line := range strings.Split(s, "\n") {
		switch {
		case strings.Contains(line, "level=ERROR"):
			errs = append(errs, line)
		case strings.Contains(line, "level=WARN"):
			warn = append(warn, line)
		}
	}
	return warn, errs
}

// TestClusterNodeKeptClientsIdlePastTheBrokersIdleTimeout runs one cluster node (real Kafka, and
// ClickHouse when TROUPE_TEST_CLICKHOUSE is set) that completes a task, then sits idle
// for three times the broker's connections.max.idle.ms, so the broker closes every
// connection of the node that idled (its producers', its fetchers', its metadata
// connections), and those of the test's own clients. Then tasks come again: one from
// the same kafka-go Writer that wrote before the idle spell, one from a new default
// client, one by HTTP on the same keep-alive client. Each is picked up and completed,
// its result is published on troupe.results, the group kept its partitions (no
// rebalance: its heartbeats went on), and the node logged no error while idle or
// after. It runs only against a broker that closes idle connections within 10 s
// (deploy/kafka.sh with KAFKA_EXTRA_PROPERTIES="connections.max.idle.ms=5000").
func TestClusterNodeKeptClientsIdlePastTheBrokersIdleTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node process and leaves it idle")
	}
	if os.Getenv("TROUPE_TEST_KAFKA") == "" {
		t.Skip("TROUPE_TEST_KAFKA is not set: the broker must close idle connections (connections.max.idle.ms)")
	}
	dir := t.TempDir()
	env := newClusterEnv(t, dir)
	idle := brokerIdleTimeout(t, env.brokers)
	if idle > 10*time.Second {
		t.Skipf("the broker closes connections idle for %s: start one with KAFKA_EXTRA_PROPERTIES=connections.max.idle.ms=5000 "+
			"(deploy/kafka.sh) to leave a node idle past it", idle)
	}
	script, records, modelLog := threeRecordsScript(t, dir)
	n := startClusterNode(t, env, "n1", "all", script, records, modelLog)
	waitOwned(t, n)
	epoch := n.gauge(t, "troupe_cluster_ownership_epoch")

	brokers := strings.Split(env.brokers, ",")
	tasks := env.prefix + messages.TopicTasks
	// The test's own clients, kept across the idle spell as a user's are.
	writer := &kgo.Writer{Addr: kgo.TCP(brokers...), Topic: tasks, Balancer: kafka.Balancer(), RequiredAcks: kgo.RequireAll,
		Transport: &kgo.Transport{}}
	t.Cleanup(func() { _ = writer.Close() })
	client := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	post := func(id string) error {
		resp, err := client.Post("http://"+n.addr+"/v1/tasks", "application/json",
			strings.NewReader(fmt.Sprintf(`{"input":"record three things","session_id":%q}`, id)))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusAccepted {
			return fmt.Errorf("POST /v1/tasks: %d %s", resp.StatusCode, b)
		}
		return nil
	}
	publish := func(w *kgo.Writer, id string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		body, _ := json.Marshal(map[string]string{"input": "record three things", "session_id": id})
		return w.WriteMessages(ctx, kgo.Message{Key: []byte(id), Value: body})
	}

	prefix := fmt.Sprintf("idle-%d-", time.Now().UnixNano())
	before := []string{prefix + "before-kafka", prefix + "before-http"}
	if err := publish(writer, before[0]); err != nil {
		t.Fatal(err)
	}
	if err := post(before[1]); err != nil {
		t.Fatal(err)
	}
	waitCompleted(t, n, before, "all recorded", 60*time.Second)
	// The status polls above used http.DefaultClient: close its connections too, so
	// that only the idle spell's effects are seen.
	http.DefaultClient.CloseIdleConnections()

	mark := len(n.stderr.String())
	time.Sleep(3 * idle)
	idleLog := n.stderr.String()[mark:]
	mark += len(idleLog)

	after := []string{prefix + "after-same-writer", prefix + "after-new-writer", prefix + "after-http"}
	if err := publish(writer, after[0]); err != nil {
		t.Errorf("the first publish of a kafka-go Writer after %s idle: %v", 3*idle, err)
	}
	fresh := &kgo.Writer{Addr: kgo.TCP(brokers...), Topic: tasks, Balancer: kafka.Balancer(), RequiredAcks: kgo.RequireAll,
		Transport: &kgo.Transport{}}
	t.Cleanup(func() { _ = fresh.Close() })
	if err := publish(fresh, after[1]); err != nil {
		t.Errorf("publish of a new kafka-go Writer: %v", err)
	}
	if err := post(after[2]); err != nil {
		t.Errorf("POST /v1/tasks on a keep-alive connection idle for %s: %v", 3*idle, err)
	}
	waitCompleted(t, n, after, "all recorded", 60*time.Second)

	// Every result is on troupe.results.
	want := map[string]bool{}
	for _, id := range append(before, after...) {
		want[id] = true
	}
	waitFor(t, 60*time.Second, "every session's completed result on troupe.results", func() bool {
		seen := map[string]bool{}
		eachResult(t, env, func(r messages.TaskResult) {
			if r.Status == messages.StatusCompleted {
				seen[r.SessionID] = true
			}
		})
		for id := range want {
			if !seen[id] {
				return false
			}
		}
		return true
	})
	if got := n.gauge(t, "troupe_cluster_ownership_epoch"); got != epoch {
		t.Errorf("the ownership epoch went from %d to %d across the idle spell: the group rebalanced", epoch, got)
	}
	r := checkAfterKill(t, records, modelLog, nil, nil, 3*len(want))
	afterLog := n.stderr.String()[mark:]
	idleWarn, idleErr := warnAndErrorLines(idleLog)
	afterWarn, afterErr := warnAndErrorLines(afterLog)
	if len(idleErr)+len(afterErr) > 0 {
		t.Errorf("the node logged errors:\nwhile idle:\n%s\nafter:\n%s", strings.Join(idleErr, "\n"), strings.Join(afterErr, "\n"))
	}
	if len(idleWarn)+len(afterWarn) > 0 {
		t.Logf("warnings while idle:\n%s\nafter:\n%s", strings.Join(idleWarn, "\n"), strings.Join(afterWarn, "\n"))
	}
	t.Logf("broker idle timeout %s, idle %s; %d sessions completed, %d side effects", idle, 3*idle, len(want), r.effects)
}
