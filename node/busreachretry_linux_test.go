package node_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// TestTaskRefusedWhileTheBrokersAreDownSaysWhenToRetry: a task posted while a
// node knows its Kafka brokers cannot be reached gets 503 with a Retry-After,
// as the other refusals a client should send again are (a full queue's 429, a
// starting node's 503), so that a client that honours it comes back rather
// than give up or retry at once in a loop; once the broker is back (on the
// same port), a task sent again is no longer refused so. Before, the 503 carried no
// Retry-After.
func TestTaskRefusedWhileTheBrokersAreDownSaysWhenToRetry(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			kc.Close()
		}
	})
	addr := kc.ListenAddrs()[0]
	_, portText, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portText)
	env := kafkaEnv{brokers: kc.ListenAddrs(), prefix: uniqueTopicPrefix(t)}
	clients, err := kafka.DialNode(env.brokers, "troupe-test-"+t.Name(), env.layout(3), watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = clients.Close() })
	n := nodetest.Start(t, node.Config{Bus: &node.Bus{Publisher: clients.Publisher, Tasks: clients.Group, Live: clients.Live}})
	env.waitTopic(t, messages.TopicTasks)
	srv := httptest.NewServer(n.Handler())
	t.Cleanup(srv.Close)
	post := func(body string) (int, string, string) {
		t.Helper()
		c := &http.Client{Timeout: time.Minute}
		resp, err := c.Post(srv.URL+"/v1/tasks", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatalf("POST /v1/tasks: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header.Get("Retry-After")
	}
	if code, body, _ := post(`{"input":"up","session_id":"up"}`); code != http.StatusAccepted {
		t.Fatalf("POST /v1/tasks with the broker up: %d %s", code, body)
	}

	kc.Close()
	stopped = true
	waitFor(t, 20*time.Second, "/healthz to answer 503 with the broker down", func() bool {
		code, _ := healthBody(t, n.Handler())
		return code == http.StatusServiceUnavailable
	})
	code, body, retry := post(`{"input":"down","session_id":"down"}`)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "cannot be reached") {
		t.Fatalf("POST /v1/tasks with the broker known down: %d %s; want 503 saying that the brokers cannot be reached", code, body)
	}
	if secs, err := strconv.Atoi(retry); err != nil || secs < 1 {
		t.Errorf("Retry-After of the 503 of a task refused while the brokers are down: %q; want a number of seconds", retry)
	}

	back, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port))
	if err != nil {
		t.Fatalf("restart kfake on port %d: %v", port, err)
	}
	t.Cleanup(back.Close)
	// The broker restarted empty (kfake keeps no topics), so the task may be
	// refused for another reason: only no longer for brokers out of reach.
	waitFor(t, 30*time.Second, "a task sent again once the broker is back not to be refused as unreachable", func() bool {
		_, body, _ := post(`{"input":"down","session_id":"down"}`)
		return !strings.Contains(body, "cannot be reached")
	})
}
