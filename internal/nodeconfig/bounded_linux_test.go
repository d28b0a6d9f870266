package nodeconfig

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestConfigReadIsBounded: a configuration or agents file that never ends (a path
// to /dev/zero or /dev/urandom by mistake, a pipe that keeps writing) is refused
// once it passes maxFile, read no further, instead of filling the memory.
// maxFile is the bound the loaders keep to (MaxFileSize).
const maxFile = MaxFileSize

func TestConfigReadIsBounded(t *testing.T) {
	for name, load := range map[string]func(string) error{
		"config": func(p string) error { _, err := Load(p); return err },
		"agents": func(p string) error { _, err := LoadAgents(p); return err },
	} {
		t.Run(name, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			written := make(chan int64, 1)
			go func() {
				defer w.Close()
				var n int64
				chunk := []byte("{" + strings.Repeat(" ", 1<<16-1))
				for n < 3*maxFile {
					k, err := w.Write(chunk)
					n += int64(k)
					if err != nil {
						break
					}
				}
				written <- n
			}()
			err = load(fmt.Sprintf("/dev/fd/%d", r.Fd()))
			r.Close()
			n := <-written
			if err == nil || !strings.Contains(err.Error(), "larger than") {
				t.Errorf("error %v, want one saying the file is larger than %d bytes", err, maxFile)
			}
			if n >= 3*maxFile {
				t.Errorf("read %d bytes of a file that never ends: want at most about %d", n, maxFile)
			}
		})
	}
}
