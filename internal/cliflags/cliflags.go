// Package cliflags holds what the node's and replay's command lines share in how
// they read their flags.
package cliflags

import "flag"

// Parse parses args with fs, taking flags before, between and after the positional
// arguments (Go's flag package stops at the first positional one), and returns the
// positional arguments in order. It fails as fs.Parse fails.
func Parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}
