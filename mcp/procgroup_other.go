//go:build !unix

package mcp

import "os/exec"

// ownGroup leaves cmd in the node's process group where there are none.
func ownGroup(*exec.Cmd) {}

// stopGroup does nothing where a server has no process group of its own.
func stopGroup(*exec.Cmd) {}
