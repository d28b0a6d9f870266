// Package cliflags holds what the node's and replay's command lines share in how
// they read their flags and write their output.
package cliflags

import (
	"flag"
	"io"
	"os"
	"sync"
)

// Parse parses args with fs, taking flags before, between and after the positional
// arguments (Go's flag package stops at the first positional one), and returns the
// positional arguments in order. It fails as fs.Parse fails.
func Parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// Serialize returns stdout and stderr behind one lock, for a command that writes
// them from several goroutines: its loggers (slog serializes only its own records)
// and its messages. An *os.File takes concurrent writes, and is returned as it is (a
// command looks at it to tell a terminal); the buffers a test passes, or a writer a
// caller wraps, need the lock.
func Serialize(stdout, stderr io.Writer) (io.Writer, io.Writer) {
	mu := new(sync.Mutex)
	return lock(mu, stdout), lock(mu, stderr)
}

func lock(mu *sync.Mutex, w io.Writer) io.Writer {
	if _, ok := w.(*os.File); ok {
		return w
	}
	return &lockedWriter{mu: mu, w: w}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
