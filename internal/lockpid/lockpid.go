// Package lockpid records in a lock file which process holds it, and reads it
// back: its pid and, on Linux, the pid namespace that pid means something in. A
// pid alone misleads across containers: two nodes sharing a data directory from
// two containers may both be pid 1, and a holder's pid may name another process,
// or none, in the reader's namespace.
//
// Data enters as the Stamp a holder writes into its lock file and leaves as the
// Holder that Read finds there.
package lockpid

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Holder is the process that wrote a lock file's stamp.
type Holder struct {
	// PID is its pid in its own pid namespace; 0 when the file names nobody.
	PID int
	// NS is its pid namespace ("pid:[4026531836]"); "" when unknown (another
	// system, or a stamp of a build that wrote the pid alone).
	NS string
}

// Stamp is what a holder writes into its lock file: "<pid> <pid namespace>\n",
// or "<pid>\n" where the namespace is unknown.
func Stamp() []byte {
	s := strconv.Itoa(os.Getpid())
	if ns := ownNS(); ns != "" {
		s += " " + ns
	}
	return []byte(s + "\n")
}

// Read returns the holder whose stamp the lock file at path holds, or Holder{}.
func Read(path string) Holder {
	b, err := os.ReadFile(path)
	if err != nil {
		return Holder{}
	}
	return Parse(b)
}

// Parse reads a stamp.
func Parse(b []byte) Holder {
	pidText, ns, _ := strings.Cut(string(bytes.TrimSpace(b)), " ")
	pid, err := strconv.Atoi(pidText)
	if err != nil || pid <= 0 {
		return Holder{}
	}
	return Holder{PID: pid, NS: strings.TrimSpace(ns)}
}

// Elsewhere reports whether the holder is in another pid namespace than this
// process (another container): its pid means nothing here.
func (h Holder) Elsewhere() bool {
	own := ownNS()
	return h.NS != "" && own != "" && h.NS != own
}

// This reports whether the holder is this process.
func (h Holder) This() bool {
	return h.PID == os.Getpid() && !h.Elsewhere()
}

// Live reports whether the holder still runs, as far as this process can tell: a
// holder in another pid namespace cannot be looked up, and counts as live.
func (h Holder) Live() bool {
	if h.PID <= 0 {
		return false
	}
	return h.Elsewhere() || alive(h.PID)
}

// String names the holder for a log line or an error: "pid 12", or "pid 1 in
// another pid namespace (pid:[4026532201])".
func (h Holder) String() string {
	if h.Elsewhere() {
		return fmt.Sprintf("pid %d in another pid namespace (%s)", h.PID, h.NS)
	}
	return fmt.Sprintf("pid %d", h.PID)
}

// ownNS is this process's pid namespace, or "" where the system does not say.
func ownNS() string {
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return ""
	}
	return ns
}
