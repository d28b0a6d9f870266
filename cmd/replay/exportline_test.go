package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// A task input the node accepts (at most 1 MiB) is recorded JSON-escaped: '<', '>'
// and '&' as \u003c..., control characters as \u00XX, 6 bytes each. Its export must
// import again: an export that its own import refuses loses the session.
func TestExportOfAnAcceptedInputImports(t *testing.T) {
	for name, input := range map[string]string{
		// (1 MiB of '<' or of invalid UTF-8, \ufffd, is refused alike, but a node takes
		// seconds over it.)
		"controls": strings.Repeat("\x01", 1<<20),
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			id := recordSession(t, dir, input)
			file := filepath.Join(t.TempDir(), "s.jsonl")
			if code, _, errs := replay(t, "export", id, "--data", dir, "--out", file); code != 0 {
				t.Fatalf("export: %d %s", code, errs)
			}
			if code, out, errs := replay(t, "import", file, "--data", t.TempDir()); code != 0 {
				t.Fatalf("import of the node's own export: %d %s %s", code, out, errs)
			}
		})
	}
}
