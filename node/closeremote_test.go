package node_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/tools"
)

// A node that runs sessions and asks another node for their tool calls (a cluster
// whose tools run on nodes of their own) closes while a call is in flight: the
// call answers within the grace, and its answer, which comes back over the bus
// (troupe.replies), is recorded before the session stops. A node started in its
// place finishes the task from that answer without asking for the call again.
// Before, Close stopped the router, and with it the handler of the replies, before
// it drained the sessions: the answer came to nobody, the drain waited the whole
// grace for it, and the session's next owner issued the call again.
func TestCloseRecordsRemoteCallsInFlight(t *testing.T) {
	for _, sharded := range []bool{true, false} {
		name := "unsharded"
		if sharded {
			name = "sharded"
		}
		t.Run(name, func(t *testing.T) {
			k, group, log := newKafkaEnv(t), uniqueGroup(t), sharedLog(t)
			pay := newBlockingPay()
			t.Cleanup(func() {
				select {
				case <-pay.release:
				default:
					close(pay.release)
				}
			})
			tool := pay.tool(t)
			clusterNode(t, k, group, log, "workers", node.RoleTools, []tools.Tool{tool}, payScript(t))
			// The grace (below revokeBudget, which bounds a sharded node's handover)
			// is far longer than the call takes once released.
			agentsCfg := func(cfg *node.Config) {
				cfg.HandoffGrace, cfg.StopTimeout = 15*time.Second, time.Minute
				cfg.Bus.Sharded = sharded
			}
			agents, closeAgents := clusterNode(t, k, group, log, "agents", node.RoleSessions|node.RoleModels,
				[]tools.Tool{tool}, payScript(t), agentsCfg)
			if _, err := agents.Submit(context.Background(), node.Task{Input: "pay 7", SessionID: "remote-drain"}); err != nil {
				t.Fatal(err)
			}
			select {
			case <-pay.entered:
			case <-time.After(60 * time.Second):
				t.Fatal("the tools node was never asked for the call")
			}
			closed := make(chan error, 1)
			go func() { closed <- agents.Close() }()
			// The call answers while the node closes, well within the grace.
			select {
			case err := <-closed:
				closed <- err
			case <-time.After(300 * time.Millisecond):
			}
			close(pay.release)
			select {
			case err := <-closed:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(90 * time.Second):
				t.Fatal("Close did not return")
			}
			closeAgents()
			if got := recordedToolResults(readAll(t, log, "remote-drain")); got != 1 {
				t.Fatalf("the log of the closed node records %d tool results, want the one that answered over the bus while it closed", got)
			}

			pay.holding(false)
			again, _ := clusterNode(t, k, group, log, "agents-again", node.RoleSessions|node.RoleModels,
				[]tools.Tool{tool}, payScript(t), func(cfg *node.Config) { cfg.Bus.Sharded = sharded })
			var events []messages.Envelope
			waitFor(t, 90*time.Second, "the task finished by the next node", func() bool {
				var err error
				events, err = again.Log().Read(context.Background(), "remote-drain", 1)
				return err == nil && len(events) > 0 &&
					(events[len(events)-1].Type == messages.TypeTaskCompleted || events[len(events)-1].Type == messages.TypeTaskFailed)
			})
			if last := events[len(events)-1]; last.Type != messages.TypeTaskCompleted {
				t.Fatalf("the task ended with %s: %s", last.Type, last.Payload)
			}
			if got := recordedToolResults(events); got != 1 {
				t.Errorf("the log records %d tool results, want one", got)
			}
			counts := pay.counts()
			if len(counts) != 1 {
				t.Fatalf("payments by key: %v, want one key", counts)
			}
			for key, times := range counts {
				if times != 1 {
					t.Errorf("the call %s was performed %d times, want once", key, times)
				}
			}
		})
	}
}

// A sharded node that closes hands its partitions over without waiting out the
// handover's budget: its Kafka subscription, stopped as Close stops admitting
// work, tells the node its partitions are revoked while Close drains the
// sessions, and the revocation leaves the drain and the handover to Close. Before,
// the revocation drained too, behind Close's drain, asking a session host that
// Close stopped meanwhile, and gave up only at the end of its 20 s budget (every
// cluster test's node took 20 s to close), warning that it abandoned the handover.
func TestCloseHandsPartitionsOverWithinTheBudget(t *testing.T) {
	c := newTestCluster(t, 0)
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	agents, closeAgents := clusterNode(t, c.k, c.group, c.log, "agents", node.RoleSessions,
		[]tools.Tool{c.led.tool("agents")}, c.calls.model(t, c.log, "agents"), func(cfg *node.Config) { cfg.Logger = logger })
	c.node("workers", node.RoleTools|node.RoleModels)
	sessions := submitTasks(t, agents, "budget", 4)
	waitCompleted(t, agents, sessions, 90*time.Second)
	closeAgents()
	if out := logs.String(); strings.Contains(out, "abandoning") || strings.Contains(out, "release sessions") {
		t.Errorf("the closing node's revocation gave up at the budget's end:\n%s", out)
	}
}

// A node that performs tool calls for other nodes' sessions (a tools node) closes
// while one is in flight: the call answers within the grace, its reply is published
// before the node gives up the request's partition, and the session records it. A
// tools node started in its place performs nothing again, and the task completes
// with the call performed once. Before, the handler of the requests gave the call up
// as soon as the node began to close, leaving its request unacked while the call ran
// on: its reply was never sent, and the next tools node performed it again (in a
// rolling restart of a cluster, cmd/node's TestClusterRollingRestart).
func TestCloseLetsCallsItServesAnswer(t *testing.T) {
	k, group, log := newKafkaEnv(t), uniqueGroup(t), sharedLog(t)
	pay := newBlockingPay()
	t.Cleanup(func() {
		select {
		case <-pay.release:
		default:
			close(pay.release)
		}
	})
	tool := pay.tool(t)
	workers, closeWorkers := clusterNode(t, k, group, log, "workers", node.RoleTools, []tools.Tool{tool}, payScript(t))
	agents, _ := clusterNode(t, k, group, log, "agents", node.RoleSessions|node.RoleModels, []tools.Tool{tool}, payScript(t))
	if _, err := agents.Submit(context.Background(), node.Task{Input: "pay 7", SessionID: "served-drain"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-pay.entered:
	case <-time.After(60 * time.Second):
		t.Fatal("the tools node was never asked for the call")
	}
	closed := make(chan error, 1)
	go func() { closed <- workers.Close() }()
	// The call answers while the tools node closes, well within the grace.
	select {
	case err := <-closed:
		closed <- err
	case <-time.After(300 * time.Millisecond):
	}
	close(pay.release)
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("Close did not return")
	}
	closeWorkers()

	pay.holding(false)
	clusterNode(t, k, group, log, "workers-again", node.RoleTools, []tools.Tool{tool}, payScript(t))
	var events []messages.Envelope
	waitFor(t, 90*time.Second, "the task finished", func() bool {
		var err error
		events, err = agents.Log().Read(context.Background(), "served-drain", 1)
		return err == nil && len(events) > 0 &&
			(events[len(events)-1].Type == messages.TypeTaskCompleted || events[len(events)-1].Type == messages.TypeTaskFailed)
	})
	if last := events[len(events)-1]; last.Type != messages.TypeTaskCompleted {
		t.Fatalf("the task ended with %s: %s", last.Type, last.Payload)
	}
	for key, times := range pay.counts() {
		if times != 1 {
			t.Errorf("the call %s was performed %d times, want once", key, times)
		}
	}
}
