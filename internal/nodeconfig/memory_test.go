package nodeconfig_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/internal/nodeconfig"
	"github.com/troupe-run/troupe/memory"
)

func loadString(t *testing.T, body string) (nodeconfig.File, error) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return nodeconfig.Load(p)
}

func TestMemorySectionIsChecked(t *testing.T) {
	for body, want := range map[string]string{
		`{"memory": {"namespace": "user alice"}}`:                                                     "memory.namespace",
		`{"memory": {"namespaces": ["user:*"]}}`:                                                      "memory.namespaces",
		`{"memory": {"embedder": {"base_url": "ftp://x", "query_model": "q", "passage_model": "p"}}}`: "memory.embedder.base_url",
		`{"memory": {"embedder": {"base_url": "http://x/v1", "query_model": "q"}}}`:                   "passage_model",
		`{"memory": {"milvus": "nohostport"}}`:                                                        "memory.milvus",
		`{"memory": {"working_capacity": -1}}`:                                                        "memory.working_capacity",
		`{"memory": {"working_ttl": "soon"}}`:                                                         "memory.working_ttl",
		`{"memory": {"idle_timeout": "soon"}}`:                                                        "memory.idle_timeout",
		`{"memory": {"max_namespaces": -1}}`:                                                          "memory.max_namespaces",
		`{"memory": {"consolidator": {"duplicate_threshold": 1.5}}}`:                                  "memory.consolidator.duplicate_threshold",
		`{"memory": {"consolidator": {"interval": "1ms"}}}`:                                           "memory.consolidator.interval",
		`{"memory": {"write_after_task": true}}`:                                                      "memory.write_after_task",
		`{"memory": {"tools": true}}`:                                                                 `"memory.tools"`,
		`{"memory": {"embedder": {"url": "http://x"}}}`:                                               `"memory.embedder.url"`,
	} {
		_, err := loadString(t, body)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error naming %s", body, err, want)
		}
	}
	fc, err := loadString(t, `{"memory": {"tool": true, "namespace": "agent:planner", "namespaces": ["user:alice"],
		"embedder": {"base_url": "http://127.0.0.1:8089/v1", "query_model": "e5-query", "passage_model": "e5-passage"},
		"working_capacity": 20, "working_ttl": "30m", "consolidator": {"interval": "5m", "threshold": 10}}}`)
	if err != nil {
		t.Fatal(err)
	}
	m := fc.Memory
	if m.AgentNamespace() != "agent:planner" || !m.Allows("user:alice") || m.Allows("agent:other") || !m.Allows("agent:planner") {
		t.Fatalf("namespaces: %+v", m)
	}
	if _, _, name, _, err := m.Embedders(); err != nil || name != "e5-passage" {
		t.Fatalf("embedders: %v %v", name, err)
	}
	var none *nodeconfig.MemoryFile
	if none.AgentNamespace() != nodeconfig.DefaultNamespace || none.Allows("user:x") {
		t.Fatal("nil section")
	}
}

// The consolidator keeps the working memories the write path keeps: a
// working_capacity above the policy's default (50) is its capacity too.
func TestMemoryWorkingCapacityIsTheConsolidatorsToo(t *testing.T) {
	for body, want := range map[string]int{
		`{"memory": {"working_capacity": 200}}`:                                       200,
		`{"memory": {"working_capacity": 5, "consolidator": {"promote_above": 0.9}}}`: 5,
		`{"memory": {}}`: 50,
		`{}`:             50,
	} {
		fc, err := loadString(t, body)
		if err != nil {
			t.Fatal(err)
		}
		policy, _, _, _ := fc.Memory.Consolidation()
		if got := policy.Capacity[memory.Working]; got != want {
			t.Errorf("%s: the consolidator keeps %d working memories, want %d", body, got, want)
		}
	}
}
