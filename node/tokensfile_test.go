package node_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/node"
)

// A tokens file is read within a bound (the wrong file given, a log or a device,
// was read whole into memory), a line too long names its line, and a file saved
// with a byte order mark says so rather than that its first token holds a
// non-ASCII byte the author cannot see.
func TestTokensFileIsReadWithinABound(t *testing.T) {
	dir := t.TempDir()
	good := strings.Repeat("a", 32)
	for _, c := range []struct{ name, body, want string }{
		{"huge", good + "\n" + strings.Repeat("#"+strings.Repeat("x", 1000)+"\n", 2000), "larger than"},
		{"long line", good + "\n" + strings.Repeat("b", 100_000) + "\n", "line 2"},
		{"bom", "\ufeff" + good + "\n", "byte order mark"},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_"))
		if err := os.WriteFile(path, []byte(c.body), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := node.ReadTokensFile(path)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), good) {
			t.Errorf("%s: %v; want an error saying %q, without the token", c.name, err, c.want)
		}
	}
}
