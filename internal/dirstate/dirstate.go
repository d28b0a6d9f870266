// Package dirstate describes a directory tree as a string, so that a test can
// tell whether a command changed anything in it.
package dirstate

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
)

// Listing returns dir's entries, recursively, with their kinds, sizes and
// modification times, one a line, sorted: two listings are equal only if nothing
// was made, removed, resized or written in dir meanwhile.
func Listing(dir string) (string, error) {
	var lines []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		lines = append(lines, fmt.Sprintf("%s %v %d %d", path, fi.Mode(), fi.Size(), fi.ModTime().UnixNano()))
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("dirstate: list %s: %w", dir, err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n"), nil
}
