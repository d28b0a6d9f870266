package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// TestImportFromStdinStopsWhenInterrupted: an import from stdin interrupted
// (Ctrl-C cancels the command's context, and the signal is taken from then on)
// while stdin sends nothing more stops at once, its temporary file removed,
// where it waited for stdin's end however long it took.
func TestImportFromStdinStopsWhenInterrupted(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	defer pw.Close()
	var out, errb bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- importFile(ctx, store{data: t.TempDir()}, "-", unfinishedRefuse, pr, &out, &errb) }()
	// Some of the file, then nothing: a producer that hangs, or a terminal.
	if _, err := pw.Write([]byte(`{"format": "troupe.session",` + "\n")); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case code := <-done:
		if code != 1 || !strings.Contains(errb.String(), "context canceled") {
			t.Fatalf("import interrupted: %d %s %s", code, out.String(), errb.String())
		}
	case <-time.After(10 * time.Second):
		pw.Close() // the import goes on, and ends
		<-done
		t.Fatal("an import from stdin interrupted did not stop within 10 s: it waited for stdin's end")
	}
	entries, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Fatalf("an interrupted import left %d temporary files (%s)", len(entries), entries[0].Name())
	}
}
