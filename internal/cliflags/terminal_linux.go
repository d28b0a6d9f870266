package cliflags

import "golang.org/x/sys/unix"

// ioctlGetTermios is the request that reads a terminal's attributes.
const ioctlGetTermios = unix.TCGETS

// flushInput discards what was typed on the terminal fd and not yet read
// (tcflush(fd, TCIFLUSH)).
func flushInput(fd int) error { return unix.IoctlSetInt(fd, unix.TCFLSH, unix.TCIFLUSH) }
