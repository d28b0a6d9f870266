package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	kgo "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/internal/smalldisk"
	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// A task read from Kafka while the node's disk is full is kept on the bus, not
// poisoned as a bad task: its session refuses it (the log has no room), the
// broker still holds it, and it runs once space is freed. A refused task over
// HTTP gets a 503 and its client sends it again; one from the bus has nobody to
// tell, so the node takes it again itself.
func TestFullDiskKeepsABusTask(t *testing.T) {
	k := newKafkaEnv(t)
	clients, err := kafka.DialNode(k.brokers, "troupe-test-busfull-"+time.Now().Format("150405.000000"), k.layout(3), watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = clients.Close() })
	d := startDiskFullNode(t, node.Config{Bus: &node.Bus{Publisher: clients.Publisher, Tasks: clients.Group, Live: clients.Live}})
	k.waitTopic(t, messages.TopicTasks)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := k.writer(t, messages.TopicTasks)
	defer w.Close()

	free := smalldisk.Fill(t, d.disk)
	session := "busfull-" + time.Now().Format("150405.000000")
	if err := w.WriteMessages(ctx, kgo.Message{Key: []byte(session), Value: []byte(`{"input":"count"}`)}); err != nil {
		t.Fatal(err)
	}
	// The node takes the task in within milliseconds; give it a few seconds of a
	// full disk (a wait, not a bound: what is checked is where the task is).
	time.Sleep(3 * time.Second)
	eachRecord(t, k, node.TopicPoison, func(m kgo.Message) {
		t.Errorf("poisoned while the disk was full: key %q, reason %q", m.Key, header(m, "reason_poisoned"))
	})
	free()
	if res := readResult(t, k, session); res.Status != messages.StatusCompleted || res.Output != "counted" {
		t.Errorf("the task after space was freed: %+v, want completed with \"counted\"", res)
	}
	if n := d.toolCalls.Load(); n != 1 {
		t.Errorf("the tool was called %d times, want once", n)
	}
	d.checkLog(t, session)
}
