//go:build review

package main

import (
	"os"
	"strings"
	"testing"
)

// Two exports in one file (cat a.jsonl b.jsonl) are refused with an error that says
// so at the second header's line, not that line 10 is an envelope missing its id.
func TestImportNamesASecondExportInTheFile(t *testing.T) {
	code, _, errs, dir := importGoldenAs(t, func(g []byte) []byte { return append(append([]byte{}, g...), g...) })
	if code != 1 || !strings.Contains(errs, "line 10") || !strings.Contains(errs, "8 events") || strings.Contains(errs, "missing id") {
		t.Fatalf("import of two exports in one file: %d %s", code, errs)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("a rejected import wrote %d files", len(entries))
	}
}
