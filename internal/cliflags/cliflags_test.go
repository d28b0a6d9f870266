package cliflags_test

import (
	"flag"
	"io"
	"slices"
	"testing"

	"github.com/troupe-run/troupe/internal/cliflags"
)

func TestParseTakesFlagsAnywhere(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	n := fs.Int("n", 0, "")
	v := fs.Bool("v", false, "")
	pos, err := cliflags.Parse(fs, []string{"-n", "3", "a", "-v", "b c", "--", "-n"})
	if err != nil || *n != 3 || !*v || !slices.Equal(pos, []string{"a", "b c", "-n"}) {
		t.Fatalf("got %q n=%d v=%v err=%v", pos, *n, *v, err)
	}
	if _, err := cliflags.Parse(fs, []string{"a", "-nope"}); err == nil {
		t.Fatal("an unknown flag after a positional argument was taken")
	}
}
