package clickhouse_test

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/clickhouse"
)

func foldSnapshot(session string, seq uint64, state []byte) eventlog.FoldSnapshot {
	return eventlog.FoldSnapshot{SessionID: session, Seq: seq, EventID: fmt.Sprintf("%s/%d", session, seq), EventSum: "e",
		Rules: 10, Codec: "1/x", Agents: "a", State: state, Sum: "c"}
}

// A session's fold snapshot is the last saved, of whatever seq (one beyond the
// log, which no load uses, must not stay), as in the SQLite log, whether the
// rows saved before are merged away or not; another session's is its own.
func TestFoldSnapshotIsTheLastSaved(t *testing.T) {
	l, db := openLog(t, clickhouse.Config{})
	ctx := testCtx(t, time.Minute)
	if _, ok, err := l.LoadSnapshot(ctx, "s"); ok || err != nil {
		t.Fatalf("a session without a snapshot: %v, %v", ok, err)
	}
	snap := func(seq uint64) eventlog.FoldSnapshot { return foldSnapshot("s", seq, []byte{0, 1, byte(seq)}) }
	if err := l.SaveSnapshot(ctx, foldSnapshot("t", 50, []byte("other"))); err != nil {
		t.Fatal(err)
	}
	conn := rawConn(t, serverAddr(t))
	for i, c := range []struct{ save, want uint64 }{{5, 5}, {9, 9}, {7, 7}, {7, 7}, {3, 3}} {
		if err := l.SaveSnapshot(ctx, snap(c.save)); err != nil {
			t.Fatal(err)
		}
		if i == 3 {
			if err := conn.Exec(ctx, "OPTIMIZE TABLE "+db+".fold_snapshots FINAL"); err != nil {
				t.Fatal(err)
			}
		}
		got, ok, err := l.LoadSnapshot(ctx, "s")
		if err != nil || !ok || !reflect.DeepEqual(got, snap(c.want)) {
			t.Fatalf("after saving seq %d: %+v, %v, %v; want %+v", c.save, got, ok, err, snap(c.want))
		}
	}
	if got, ok, err := l.LoadSnapshot(ctx, "t"); err != nil || !ok || !reflect.DeepEqual(got, foldSnapshot("t", 50, []byte("other"))) {
		t.Fatalf("the other session's: %+v, %v, %v", got, ok, err)
	}
	if err := l.SaveSnapshot(ctx, eventlog.FoldSnapshot{SessionID: "s"}); err == nil {
		t.Fatal("a snapshot at seq 0 was saved")
	}
	// Another Log on the database (another node) takes the last saved too.
	l2, _ := openLog(t, clickhouse.Config{Database: db})
	if err := l2.SaveSnapshot(ctx, snap(4)); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := l.LoadSnapshot(ctx, "s"); err != nil || !ok || !reflect.DeepEqual(got, snap(4)) {
		t.Fatalf("after another node saved seq 4: %+v, %v, %v", got, ok, err)
	}
}

// A state of a long session (tens of megabytes, any bytes) goes through the
// native protocol and comes back whole; one beyond MaxSnapshotBytes is refused
// with ErrSnapshotTooLarge before anything is sent, and the session keeps the
// snapshot it had.
func TestLargeFoldSnapshot(t *testing.T) {
	const size = 24 << 20
	l, _ := openLog(t, clickhouse.Config{MaxSnapshotBytes: size})
	ctx := testCtx(t, 2*time.Minute)
	state := make([]byte, size)
	for i := range state {
		state[i] = byte(i*7 + i>>13)
	}
	big := foldSnapshot("long", 40_000, state)
	if err := l.SaveSnapshot(ctx, big); err != nil {
		t.Fatal(err)
	}
	got, ok, err := l.LoadSnapshot(ctx, "long")
	if err != nil || !ok || !bytes.Equal(got.State, state) {
		t.Fatalf("the state of %d bytes came back as %d bytes, %v, %v", len(state), len(got.State), ok, err)
	}
	got.State = nil
	if big.State = nil; !reflect.DeepEqual(got, big) {
		t.Fatalf("loaded %+v, want %+v", got, big)
	}
	err = l.SaveSnapshot(ctx, foldSnapshot("long", 40_100, make([]byte, size+1)))
	if !errors.Is(err, clickhouse.ErrSnapshotTooLarge) || !strings.Contains(err.Error(), "MaxSnapshotBytes") {
		t.Fatalf("a state beyond MaxSnapshotBytes: %v, want ErrSnapshotTooLarge", err)
	}
	if got, ok, err := l.LoadSnapshot(ctx, "long"); err != nil || !ok || got.Seq != 40_000 || len(got.State) != size {
		t.Fatalf("after the refusal: seq %d, %d bytes, %v, %v; want the snapshot at seq 40000", got.Seq, len(got.State), ok, err)
	}
}
