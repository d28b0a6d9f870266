//go:build !unix

package skills

import "os/exec"

// nonBlock is 0 where named pipes do not block an open.
const nonBlock = 0

// killGroup leaves cmd's cancellation to kill the script alone.
func killGroup(*exec.Cmd) {}

// stopGroup does nothing where a script has no process group.
func stopGroup(*exec.Cmd) {}
