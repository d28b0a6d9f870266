package node_test

import (
	"context"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/node"
)

func TestParseRoles(t *testing.T) {
	for in, want := range map[string]node.Role{
		"all":             node.RoleAll,
		"sessions":        node.RoleSessions,
		"sessions, tools": node.RoleSessions | node.RoleTools,
		"tools,models":    node.RoleTools | node.RoleModels,
	} {
		got, err := node.ParseRoles(in)
		if err != nil || got != want {
			t.Errorf("ParseRoles(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "session", "tools,,models", "everything"} {
		if _, err := node.ParseRoles(bad); err == nil || !strings.Contains(err.Error(), "role") {
			t.Errorf("ParseRoles(%q): err = %v", bad, err)
		}
	}
	if s := (node.RoleSessions | node.RoleTools).String(); s != "sessions,tools" {
		t.Errorf("String() = %q", s)
	}
	if !node.Role(0).Has(node.RoleModels) {
		t.Error("the zero Role must include every role")
	}
}

// Roles split work between nodes over a shared bus; an embedded node refuses them,
// and a sharded bus needs the partitioner every producer uses.
func TestRolesNeedASharedBus(t *testing.T) {
	_, err := node.New(context.Background(), node.Config{DataDir: t.TempDir(), Roles: node.RoleTools})
	if err == nil || !strings.Contains(err.Error(), "roles need a shared bus") {
		t.Fatalf("err = %v", err)
	}
	_, err = node.New(context.Background(), node.Config{DataDir: t.TempDir(), Bus: &node.Bus{Sharded: true}})
	if err == nil || !strings.Contains(err.Error(), "Partition") {
		t.Fatalf("err = %v", err)
	}
}
