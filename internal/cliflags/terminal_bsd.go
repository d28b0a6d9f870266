//go:build darwin || freebsd || netbsd || openbsd || dragonfly

package cliflags

import "golang.org/x/sys/unix"

// ioctlGetTermios is the request that reads a terminal's attributes.
const ioctlGetTermios = unix.TIOCGETA

// flushInput discards what was typed on the terminal fd and not yet read
// (tcflush(fd, TCIFLUSH): TIOCFLUSH of FREAD, 1).
func flushInput(fd int) error { return unix.IoctlSetPointerInt(fd, unix.TIOCFLUSH, 1) }
