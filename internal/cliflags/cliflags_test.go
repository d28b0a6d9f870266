package cliflags_test

import (
	"bytes"
	"flag"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
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

// Writes to both writers from several goroutines reach the buffers whole, one at a
// time (under -race, an unlocked bytes.Buffer fails this).
func TestSerializeLocksBothWriters(t *testing.T) {
	var buf bytes.Buffer
	stdout, stderr := cliflags.Serialize(&buf, &buf)
	var wg sync.WaitGroup
	for i := range 8 {
		w := stdout
		if i%2 == 1 {
			w = stderr
		}
		wg.Go(func() {
			for range 100 {
				_, _ = w.Write([]byte("line\n"))
			}
		})
	}
	wg.Wait()
	if got := strings.Count(buf.String(), "line\n"); got != 800 || buf.Len() != 800*5 {
		t.Fatalf("%d whole lines in %d bytes, want 800 in %d", got, buf.Len(), 800*5)
	}
}

// An *os.File comes back as it is: the commands look at it to tell a terminal.
func TestSerializeKeepsFiles(t *testing.T) {
	var buf bytes.Buffer
	stdout, stderr := cliflags.Serialize(os.Stdout, &buf)
	if stdout != io.Writer(os.Stdout) {
		t.Errorf("stdout is %T, want *os.File", stdout)
	}
	if _, ok := stderr.(*bytes.Buffer); ok {
		t.Error("a bytes.Buffer came back unlocked")
	}
}
