package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// replay import - reads the export from standard input (as replay export writes
// it to standard output), as it reads a file.
func TestImportDashReadsStdin(t *testing.T) {
	dir := t.TempDir()
	id := recordSession(t, dir, "What is 12 * (7 + 5)?")
	code, export, errs := replay(t, "export", id, "--data", dir)
	if code != 0 {
		t.Fatalf("export: %d %s", code, errs)
	}
	other := t.TempDir()
	var out, errb bytes.Buffer
	if code := runIn(context.Background(), []string{"import", "-", "--data", other}, strings.NewReader(export), &out, &errb); code != 0 {
		t.Fatalf("import -: %d %s %s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "imported session "+id) {
		t.Fatalf("import -: %s", out.String())
	}
	if code, got, errs := replay(t, "export", id, "--data", other); code != 0 || got != export {
		t.Fatalf("the imported session exports as %d %q (%s), want the export read", code, got, errs)
	}
}
