package actors_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/messages"
)

// pagesOf reads events in pages of size events, as a log's paged reads give them.
func pagesOf(events []messages.Envelope, size int) actors.Pages {
	return func(fn func(page []messages.Envelope) error) error {
		for i := 0; i < len(events); i += size {
			if err := fn(events[i:min(i+size, len(events))]); err != nil {
				return err
			}
		}
		return nil
	}
}

// TestVerifyPagesChecksTheSeqsAcrossPages: a session read a page at a time is
// checked whole as one held whole is: a seq missing at a page's start, or one
// repeated there, is found, and nothing is re-decided.
func TestVerifyPagesChecksTheSeqsAcrossPages(t *testing.T) {
	session := func(seqs ...uint64) []messages.Envelope {
		var out []messages.Envelope
		for _, seq := range seqs {
			e, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: "x", Rules: actors.ContextRules})
			if err != nil {
				t.Fatal(err)
			}
			e.ID, e.SessionID, e.Seq, e.Actor = fmt.Sprintf("s/%d", seq), "s", seq, "ingress"
			out = append(out, e)
		}
		return out
	}
	for _, c := range []struct {
		seqs []uint64
		want string
	}{
		{[]uint64{1, 2, 3, 5, 6}, "lacks seq 4"},
		{[]uint64{1, 2, 3, 3, 4}, "seq 3 follows 3"},
	} {
		events := session(c.seqs...)
		_, whole := actors.VerifyReport(actors.Agents{}, events, 1, nil)
		_, paged := actors.VerifyPages(actors.Agents{}, pagesOf(events, 3), 1, nil)
		if whole == nil || paged == nil || !strings.Contains(paged.Error(), c.want) || paged.Error() != whole.Error() {
			t.Errorf("seqs %v: in pages %v, whole %v; want %q", c.seqs, paged, whole, c.want)
		}
	}
	if _, err := actors.VerifyPages(actors.Agents{}, pagesOf(nil, 3), 1, nil); err == nil {
		t.Error("a session of no events verified")
	}
}
