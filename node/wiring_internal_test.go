package node

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/troupe-run/troupe/messages"
)

// TestRoleHandlers builds a node for each role set and checks that its router has
// exactly the handlers the role set needs, on their topics, and that a node asks
// remote performers (BusEffects) exactly when it reads their replies.
func TestRoleHandlers(t *testing.T) {
	topics := map[string]string{
		"tasks":          messages.TopicTasks,
		"tool-requests":  messages.TopicToolRequests,
		"model-requests": messages.TopicModelRequests,
		"effect-cancels": messages.TopicEffectCancels,
		"replies":        messages.TopicReplies,
	}
	for _, h := range roleHandlers {
		if want, ok := topics[h.name]; !ok || h.topic != want {
			t.Errorf("roleHandlers has %s on %s; want %q", h.name, h.topic, want)
		}
	}
	cases := []struct {
		name          string
		roles         Role
		bus           bool // a shared bus (else the embedded one)
		tools, models bool // the shared bus consumes the request topics
		want          []string
	}{
		// The session actors feed the hub directly; no node reads troupe.events
		// through its router (the hub subscribes while it has remote watchers).
		{"embedded", 0, false, false, false, []string{"tasks"}},
		{"all", RoleAll, true, true, true, []string{"effect-cancels", "model-requests", "tasks", "tool-requests"}},
		{"all without request subscribers", RoleAll, true, false, false, []string{"tasks"}},
		{"sessions", RoleSessions, true, true, true, []string{"replies", "tasks"}},
		{"sessions,tools", RoleSessions | RoleTools, true, true, true, []string{"effect-cancels", "replies", "tasks", "tool-requests"}},
		{"sessions,models", RoleSessions | RoleModels, true, true, true, []string{"effect-cancels", "model-requests", "replies", "tasks"}},
		{"tools", RoleTools, true, true, true, []string{"effect-cancels", "tool-requests"}},
		{"models", RoleModels, true, true, true, []string{"effect-cancels", "model-requests"}},
		{"tools,models", RoleTools | RoleModels, true, true, true, []string{"effect-cancels", "model-requests", "tool-requests"}},
		{"tools without a tools subscriber", RoleTools, true, false, true, nil},
		{"client", RoleClient, true, true, true, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := Config{DataDir: t.TempDir(), Roles: c.roles}
			if c.bus {
				gc := NewEmbeddedBus(watermill.NopLogger{})
				t.Cleanup(func() { _ = gc.Close() })
				cfg.Bus = &Bus{Publisher: gc, Tasks: gc, Live: gc}
				if c.tools {
					cfg.Bus.Tools = gc
				}
				if c.models {
					cfg.Bus.Models = gc
				}
			}
			n, err := New(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = n.Close() })
			var got []string
			for name := range n.router.Handlers() {
				got = append(got, name)
			}
			slices.Sort(got)
			if !slices.Equal(got, c.want) {
				t.Errorf("handlers %s, want %s", strings.Join(got, ","), strings.Join(c.want, ","))
			}
			if asks := n.remote != nil; asks != slices.Contains(got, "replies") {
				t.Errorf("BusEffects built: %v; replies handler attached: %v", asks, !asks)
			}
		})
	}
}
