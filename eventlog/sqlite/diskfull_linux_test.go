package sqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/internal/smalldisk"
	"github.com/troupe-run/troupe/messages"
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

// TestWritableFollowsAFullDisk: eventlog.Health says whether writes go through.
// While they do, Writable writes nothing; once a write failed on a full disk it
// says ErrFull; once space is freed it says nil again with no append of a caller
// in between (its own probe write learns it), and appends go through.
func TestWritableFollowsAFullDisk(t *testing.T) {
	disk := smalldisk.Mount(t)
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: filepath.Join(disk, "data")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lg.Close() })
	ctx := testCtx(t)
	if err := lg.Append(ctx, []messages.Envelope{event(t, "s", 1)}); err != nil {
		t.Fatal(err)
	}
	before := lg.Stats().Transactions
	for range 100 {
		if err := lg.Writable(ctx); err != nil {
			t.Fatalf("Writable after a write went through: %v", err)
		}
	}
	if n := lg.Stats().Transactions - before; n != 0 {
		t.Errorf("Writable of a log whose writes go through wrote %d transactions", n)
	}

	free := smalldisk.Fill(t, disk)
	// A batch larger than what the WAL holds already: it must grow the file.
	batch := make([]messages.Envelope, 0, 200)
	for seq := uint64(2); seq < 202; seq++ {
		batch = append(batch, event(t, "s", seq))
	}
	if err := lg.Append(ctx, batch); !errors.Is(err, eventlog.ErrFull) {
		t.Fatalf("Append on a full disk: %v; want eventlog.ErrFull", err)
	}
	for range 3 {
		if err := lg.Writable(ctx); !errors.Is(err, eventlog.ErrFull) {
			t.Fatalf("Writable on a full disk: %v; want eventlog.ErrFull", err)
		}
	}
	free()
	deadline := time.Now().Add(10 * time.Second)
	for lg.Writable(ctx) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("Writable once space was freed, with no append: %v; want nil", lg.Writable(ctx))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := lg.Append(ctx, batch); err != nil {
		t.Fatalf("Append once space was freed: %v", err)
	}
	if events, err := lg.Read(ctx, "s", 1); err != nil || len(events) != 201 {
		t.Fatalf("read %d events (%v), want 201: the probe must leave the log as it was", len(events), err)
	}
}
