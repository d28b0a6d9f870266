package node_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/tools"
)

// A node that serves tool calls for other nodes performs the calls of many
// sessions at once, however their sessions fall on the request topic's partitions.
// Twelve sessions on a six-partition topic each call a tool that returns only once
// all twelve calls are in it at the same time. Before, the node performed one
// request per partition at a time: at most six calls were ever in at once, and
// every call waited out the meeting's time limit.
func TestToolsNodePerformsManyCallsOfAPartitionAtOnce(t *testing.T) {
	const sessions = 12 // twice the partitions of clusterNode's topics
	k, group, log := newKafkaEnv(t), uniqueGroup(t), sharedLog(t)
	m := &meeting{want: sessions, all: make(chan struct{})}
	tool := m.tool(t)
	script, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "meet", Arguments: `{}`}}},
		{Content: "done"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	clusterNode(t, k, group, log, "workers", node.RoleTools, []tools.Tool{tool}, script)
	agents, _ := clusterNode(t, k, group, log, "agents", node.RoleSessions|node.RoleModels, []tools.Tool{tool}, script)
	var ids []string
	for i := range sessions {
		id := fmt.Sprintf("meet-%02d", i)
		if _, err := agents.Submit(context.Background(), node.Task{Input: "meet", SessionID: id}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	waitCompleted(t, agents, ids, 3*time.Minute)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.peak != sessions {
		t.Fatalf("at most %d of the %d calls were performed at once by the tools node, want all of them", m.peak, sessions)
	}
}

// meeting is a tool whose calls return once want of them are in it at once, or
// after its time limit.
type meeting struct {
	want int
	all  chan struct{}

	mu       sync.Mutex
	in, peak int
	closed   bool
}

func (m *meeting) tool(t *testing.T) tools.Tool {
	t.Helper()
	tool, err := tools.Func("meet", "Waits for the others.", func(ctx context.Context, _ struct{}) (string, error) {
		m.mu.Lock()
		m.in++
		m.peak = max(m.peak, m.in)
		if m.in == m.want && !m.closed {
			m.closed = true
			close(m.all)
		}
		m.mu.Unlock()
		defer func() {
			m.mu.Lock()
			m.in--
			m.mu.Unlock()
		}()
		select {
		case <-m.all:
			return "met", nil
		case <-time.After(20 * time.Second):
			return "alone", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return tool
}
