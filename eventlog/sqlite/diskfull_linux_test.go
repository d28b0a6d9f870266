package sqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/internal/smalldisk"
)

// TestOpenOnAFullDiskSaysSo: a log opened on a full disk (node run, node serve)
// fails with eventlog.ErrFull, naming the full filesystem, where SQLite's own
// error was "disk I/O error (4874)".
func TestOpenOnAFullDiskSaysSo(t *testing.T) {
	disk := smalldisk.Mount(t)
	dir := filepath.Join(disk, "data")
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := lg.Close(); err != nil {
		t.Fatal(err)
	}
	free := smalldisk.Fill(t, disk)
	lg, err = sqlite.Open(context.Background(), sqlite.Config{Dir: dir})
	if err == nil {
		lg.Close()
		t.Skip("SQLite opened the log on a full disk: nothing to say")
	}
	if !errors.Is(err, eventlog.ErrFull) {
		t.Errorf("Open on a full disk: %v; want eventlog.ErrFull", err)
	}
	free()
	lg, err = sqlite.Open(context.Background(), sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatalf("Open once space was freed: %v", err)
	}
	lg.Close()
}
