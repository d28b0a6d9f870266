package node

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

// BenchmarkRunningListWithEndedSignIns measures the listing of the running sessions
// that a node's start (resume), a partition's assignment (resumeOwned) and the
// pending approvals make, over 100 running sessions, without and with 10,000
// dashboard sign-ins that ended: each sign-in is a stream of its own, and its row
// in the log's session summary is visited (then dropped by SessionsOnly) by every
// such listing.
func BenchmarkRunningListWithEndedSignIns(b *testing.B) {
	for _, ended := range []int{0, 10000} {
		b.Run(fmt.Sprintf("signins=%d", ended), func(b *testing.B) {
			ctx := context.Background()
			log, err := sqlite.Open(ctx, sqlite.Config{Dir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			defer log.Close()
			s := newUISessions(time.Hour, maxUISessions, func() [][sha256.Size]byte { return nil }, nil)
			s.log = log
			now := time.Now()
			for range ended {
				id, _, _, err := s.open(ctx, sha256.Sum256([]byte("tok")), now)
				if err != nil {
					b.Fatal(err)
				}
				if err := s.end(ctx, id, "logout", now); err != nil {
					b.Fatal(err)
				}
			}
			for i := range 100 {
				e, _ := messages.NewEnvelope(&messages.TaskSubmitted{Input: "x"})
				e.ID, e.SessionID, e.Seq, e.TS, e.Actor = fmt.Sprintf("t%d", i), fmt.Sprintf("s%d", i), 1, now.UnixMicro(), "session"
				if err := log.Append(ctx, []messages.Envelope{e}); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for b.Loop() {
				infos, err := log.Sessions(ctx, eventlog.Filter{Status: messages.StatusRunning, SessionsOnly: true})
				if err != nil || len(infos) != 100 {
					b.Fatal(len(infos), err)
				}
			}
		})
	}
}
