//go:build !unix

package skills

import "os/exec"

// killGroup leaves cmd's cancellation to kill the script alone.
func killGroup(*exec.Cmd) {}
