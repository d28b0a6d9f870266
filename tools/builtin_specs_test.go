package tools_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

var updateSpecs = flag.Bool("update-specs", false, "rewrite testdata/builtin_specs.golden with the built-in tools' specs as they are")

// TestBuiltinToolSpecsAreAsRecorded guards the built-in tools' specs: their names,
// descriptions and schemas are part of every prompt that offers them (the
// recorded prompt_hash), so rewording one makes replay verify find every session
// recorded before as diverging, although the agent decided the same. A change must
// come with its earlier wording in descriptionChanges (prior.go), which verify
// tries, and then the golden file rewritten:
//
//	go test ./tools -run TestBuiltinToolSpecsAreAsRecorded -update-specs
func TestBuiltinToolSpecsAreAsRecorded(t *testing.T) {
	files, err := tools.NewFiles(tools.FilesConfig{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	fetch, err := tools.NewHTTPFetch(tools.HTTPFetchConfig{})
	if err != nil {
		t.Fatal(err)
	}
	specs := []messages.ToolSpec{tools.Calculator{}.Spec(), tools.NewClock(nil).Spec(), fetch.Spec(), files.Spec()}
	for _, sub := range files.Expand() {
		specs = append(specs, sub.Spec())
	}
	var lines []string
	for _, s := range specs {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		lines = append(lines, fmt.Sprintf("%s %s", s.Name, hex.EncodeToString(sum[:8])))
	}
	got := strings.Join(lines, "\n") + "\n"
	path := filepath.Join("testdata", "builtin_specs.golden")
	if *updateSpecs {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("a built-in tool's spec changed:\n%s\nwant:\n%s\nSessions recorded before now diverge in replay verify at their first model request that offers it: "+
			"add the earlier wording to descriptionChanges (tools/prior.go), then rewrite the golden file with -update-specs", got, want)
	}
}
