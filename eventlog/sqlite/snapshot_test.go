package sqlite

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
)

// A session's fold snapshot is kept as saved, and replaced by the next saved,
// of whatever seq (one beyond the log, which no load uses, must not stay).
func TestFoldSnapshotIsTheLastSaved(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	l := openTemp(ctx, t)
	if _, ok, err := l.LoadSnapshot(ctx, "s"); ok || err != nil {
		t.Fatalf("a session without a snapshot: %v, %v", ok, err)
	}
	snap := func(seq uint64) eventlog.FoldSnapshot {
		return eventlog.FoldSnapshot{SessionID: "s", Seq: seq, EventID: fmt.Sprintf("s/%d", seq), EventSum: "e", Rules: 10, Codec: "1/x", Agents: "a", State: []byte{0, 1, byte(seq)}, Sum: "c"}
	}
	for _, c := range []struct{ save, want uint64 }{{5, 5}, {9, 9}, {7, 7}, {7, 7}} {
		if err := l.SaveSnapshot(ctx, snap(c.save)); err != nil {
			t.Fatal(err)
		}
		got, ok, err := l.LoadSnapshot(ctx, "s")
		if err != nil || !ok || !reflect.DeepEqual(got, snap(c.want)) {
			t.Fatalf("after saving seq %d: %+v, %v, %v; want %+v", c.save, got, ok, err, snap(c.want))
		}
	}
	if err := l.SaveSnapshot(ctx, eventlog.FoldSnapshot{SessionID: "s"}); err == nil {
		t.Fatal("a snapshot at seq 0 was saved")
	}
}
