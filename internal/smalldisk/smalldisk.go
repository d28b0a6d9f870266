//go:build linux

// Package smalldisk gives tests a small filesystem they can fill to the brim, to
// see what a full disk does to the event log and the node: Mount mounts a tmpfs
// for the test's lifetime (root only: the test is skipped otherwise), Fill fills it
// and returns the function that frees the space again.
package smalldisk

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Mount mounts a tmpfs of 4 MiB for the test's lifetime and returns its path. It
// skips the test where mounting is not permitted (not root; .ci/run runs as root).
func Mount(tb testing.TB) string {
	tb.Helper()
	dir := filepath.Join(tb.TempDir(), "disk")
	if err := os.Mkdir(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=4m"); err != nil {
		tb.Skipf("a full disk needs a small filesystem: mounting a tmpfs at %s was refused (%v); run the test as root", dir, err)
	}
	tb.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			tb.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// Fill fills the filesystem of dir to the brim with a file, and returns a function
// that removes it.
func Fill(tb testing.TB, dir string) (free func()) {
	tb.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o644)
	if err != nil {
		tb.Fatal(err)
	}
	for _, size := range []int{64 << 10, 4 << 10, 512, 1} {
		buf := make([]byte, size)
		for {
			if _, err := f.Write(buf); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					tb.Fatalf("fill %s: %v", dir, err)
				}
				break
			}
		}
	}
	if err := f.Close(); err != nil && !errors.Is(err, syscall.ENOSPC) {
		tb.Fatal(err)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil || st.Bavail != 0 {
		tb.Fatalf("the filesystem of %s is not full: %d blocks free (%v)", dir, st.Bavail, err)
	}
	return func() {
		if err := os.Remove(path); err != nil {
			tb.Fatal(err)
		}
	}
}
