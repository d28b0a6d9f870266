package context_test

import (
	"reflect"
	"strings"
	"testing"

	pctx "github.com/troupe-run/troupe/pipelines/context"
)

// BuildMessages gives the messages and the report Build's context gives, whether
// everything fits or much is dropped and cut, build after build (its buffer is
// reused), and the same error for invalid items.
func TestBuildMessagesIsBuildsMessagesAndReport(t *testing.T) {
	for _, c := range []struct {
		name  string
		n     int
		opts  pctx.Options
		items []pctx.Item
	}{
		{"fits", 12, pctx.Options{HistoryTurns: -1}, nil},
		{"drops", 1000, pctx.Options{HistoryTurns: -1}, nil},
		{"cuts", 60, pctx.Options{HistoryTurns: -1, Window: 1200, ReservedOutput: 100, Summarize: true},
			[]pctx.Item{{ID: "long", Kind: pctx.KindNote, Section: pctx.SectionState, Pinned: true, Text: strings.Repeat("word ", 800)}}},
		{"history window", 200, pctx.Options{HistoryTurns: 8}, nil},
	} {
		items := append(benchItems(c.n), c.items...)
		b := pctx.Builder{Tokenizer: words{}, Options: c.opts}
		for range 3 {
			want, err := b.Build(items)
			if err != nil {
				t.Fatalf("%s: Build: %v", c.name, err)
			}
			msgs, report, err := b.BuildMessages(items)
			if err != nil {
				t.Fatalf("%s: BuildMessages: %v", c.name, err)
			}
			if !reflect.DeepEqual(msgs, want.Messages()) {
				t.Fatalf("%s: messages\n%+v\nwant\n%+v", c.name, msgs, want.Messages())
			}
			if c.name == "drops" && len(report.Dropped) == 0 || c.name == "cuts" && len(report.Truncated) == 0 {
				t.Fatalf("%s: the case is not what it says: %+v", c.name, *report)
			}
			if !reflect.DeepEqual(*report, want.Report) {
				t.Fatalf("%s: report\n%+v\nwant\n%+v", c.name, *report, want.Report)
			}
		}
	}
	dup := []pctx.Item{{ID: "a", Text: "x", Tokens: 1}, {ID: "a", Text: "y", Tokens: 1}}
	_, errBuild := pctx.Builder{}.Build(dup)
	_, _, err := pctx.Builder{}.BuildMessages(dup)
	if err == nil || errBuild == nil || err.Error() != errBuild.Error() {
		t.Fatalf("duplicate IDs: BuildMessages %v, Build %v", err, errBuild)
	}
}
