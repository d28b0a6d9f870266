//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package cliflags

import "os"

// IsTerminal reports whether f is a terminal; where terminal attributes cannot be
// read, a character device is taken for one.
func IsTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// FlushInput discards what was typed on the terminal f and not yet read, where it
// can; here it discards nothing.
func FlushInput(f *os.File) error { return nil }
