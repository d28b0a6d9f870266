package mcp

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestExposedName(t *testing.T) {
	long := strings.Repeat("a", 80)
	for _, c := range []struct{ server, tool, want string }{
		{"everything", "echo", "everything__echo"},
		{"gh", "repos.list/all", "gh__repos_list_all"},
		{"gh", "émoji", "gh__" + "__moji"},
		{"s", long, "s__" + strings.Repeat("a", 64-3-9) + "_"},
	} {
		got := exposedName(c.server, c.tool)
		if !strings.HasPrefix(got, c.want) || len(got) > maxNameLen {
			t.Errorf("exposedName(%q, %q) = %q, want %q…, at most 64 characters", c.server, c.tool, got, c.want)
		}
	}
	// Two long names that share their head stay apart.
	if a, b := exposedName("s", long+"x"), exposedName("s", long+"y"); a == b || len(a) != maxNameLen {
		t.Errorf("long names %q and %q", a, b)
	}
}

func TestAllowDeny(t *testing.T) {
	s := ServerConfig{Allow: []string{"get-*", "echo", "read_resource"}, Deny: []string{"get-env"}}
	for name, want := range map[string]bool{"echo": true, "get-sum": true, "get-env": false, "toggle": false, "read_resource": true, "get_prompt": false} {
		if got := s.allowed(name); got != want {
			t.Errorf("allowed(%q) = %v, want %v", name, got, want)
		}
	}
	if !(ServerConfig{}).allowed("anything") || (ServerConfig{Deny: []string{"*"}}).allowed("x") {
		t.Error("an empty allow list allows all; deny * denies all")
	}
}

func TestObjectSchemaIsCanonical(t *testing.T) {
	a, err := objectSchema(json.RawMessage(`{"required":["x"],"properties":{"x":{"type":"integer","maximum":1e3}},"type":"object"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := objectSchema(json.RawMessage(`{"type":"object","properties":{"x":{"maximum":1e3,"type":"integer"}},"required":["x"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"properties":{"x":{"maximum":1e3,"type":"integer"}},"required":["x"],"type":"object"}`; string(a) != want || string(b) != want {
		t.Errorf("%s and %s, want both %s", a, b, want)
	}
	if s, _ := objectSchema(json.RawMessage(`{"properties":{"html":{"description":"<b>&"}}}`)); string(s) != `{"properties":{"html":{"description":"<b>&"}},"type":"object"}` {
		t.Errorf("schema %s: want type object added, and no HTML escapes", s)
	}
	for _, bad := range []any{json.RawMessage(`"x"`), json.RawMessage(`[]`), json.RawMessage(`null`), json.RawMessage(`{"type":"string"}`), json.RawMessage(`{"type":["object","null"]}`),
		json.RawMessage(`{"description":"` + strings.Repeat("x", maxSchemaBytes) + `"}`)} {
		if s, err := objectSchema(bad); err == nil {
			t.Errorf("objectSchema(%.40s) = %s, want an error", bad, s)
		}
	}
}

func TestCutKeepsTheHeadAndSaysHowMuch(t *testing.T) {
	c := &Client{cfg: ClientConfig{MaxResultBytes: 10}}
	if got := c.cut("short"); got != "short" {
		t.Errorf("cut(short) = %q", got)
	}
	got := c.cut(strings.Repeat("é", 20)) // 40 bytes; a cut at 10 must not split a character
	if !strings.HasPrefix(got, strings.Repeat("é", 5)+"\n[cut: the result is 40 bytes; the first 10 are shown]") {
		t.Errorf("cut = %q", got)
	}
}

// The client owns the catalog names of its configured servers' tools, connected or
// not: a chain's step may name them (tools.ChainCatalog).
func TestClientOwnsItsServersNames(t *testing.T) {
	c, err := NewClient(ClientConfig{Servers: map[string]ServerConfig{"gh": {URL: "http://127.0.0.1:1/mcp"}, "wx-2": {Command: "true"}}})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{
		"gh__create_issue": true, exposedName("wx-2", "a.b"): true, "gh__": false, "gh": false,
		"sky__forecast": false, "g__h": false, "calculator": false,
	} {
		if got := c.Owns(name); got != want {
			t.Errorf("Owns(%q) = %v, want %v", name, got, want)
		}
	}
}

// The session IDs the server makes are those it resumes.
func TestIssuedSessionIDsAreValid(t *testing.T) {
	var ids sessionIDs
	for range 100 {
		if id := ids.id(); !validSessionID(id) {
			t.Fatalf("issued session ID %q is not valid", id)
		}
	}
}
