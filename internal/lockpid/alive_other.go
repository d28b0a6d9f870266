//go:build !unix

package lockpid

// alive cannot look a process up on this system: it counts as live.
func alive(int) bool { return true }
