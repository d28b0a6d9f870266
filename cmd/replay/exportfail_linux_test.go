package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// An export that fails part way (a full disk; here the process's file size limit)
// leaves nothing half-written at --out, and a former export there is kept: the
// file at --out is either the whole export or what was there before.
func TestExportThatFailsLeavesNoPartFile(t *testing.T) {
	// A session with a 256 KiB input, so that its export is larger than the limit
	// below while the log's own files, which export reads, are read within it.
	golden, err := os.ReadFile(filepath.Join("testdata", "session.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Replace(string(golden), "What is 12 * (7 + 5)?", strings.Repeat("x", 256<<10), 1)
	file := filepath.Join(t.TempDir(), "big.jsonl")
	if err := os.WriteFile(file, []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if code, _, errs := replay(t, "import", file, "--data", dir); code != 0 {
		t.Fatal(errs)
	}
	const session = "rec-1795995525076202836"
	out := filepath.Join(t.TempDir(), "export.jsonl")
	if code, _, errs := replay(t, "export", session, "--data", dir, "--out", out); code != 0 {
		t.Fatal(errs)
	}
	whole, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	limit := old
	limit.Cur = 128 << 10 // the export is larger: its writes fail with EFBIG past it
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &limit); err != nil {
		t.Skip("cannot set RLIMIT_FSIZE:", err)
	}
	code, _, errs := replay(t, "export", session, "--data", dir, "--out", out)
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	if code != 1 || !strings.Contains(errs, "error:") {
		t.Fatalf("export past the file size limit: %d %s", code, errs)
	}
	if got, err := os.ReadFile(out); err != nil || string(got) != string(whole) {
		t.Fatalf("a failed export left %d bytes at --out (err %v), where the former export had %d", len(got), err, len(whole))
	}
	fresh := filepath.Join(t.TempDir(), "fresh.jsonl")
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &limit); err != nil {
		t.Fatal(err)
	}
	code, _, errs = replay(t, "export", session, "--data", dir, "--out", fresh)
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	if code != 1 {
		t.Fatalf("export past the file size limit: %d %s", code, errs)
	}
	entries, _ := os.ReadDir(filepath.Dir(fresh))
	if len(entries) != 0 {
		t.Fatalf("a failed export left %s behind", entries[0].Name())
	}
}
