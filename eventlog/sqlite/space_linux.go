package sqlite

import "syscall"

// noSpace reports whether the filesystem of dir has no space left for its users.
func noSpace(dir string) bool {
	var st syscall.Statfs_t
	return syscall.Statfs(dir, &st) == nil && st.Bavail == 0
}
