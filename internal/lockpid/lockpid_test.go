package lockpid

import (
	"os"
	"testing"
)

// TestStampNamesThisProcess reads back this process's stamp, and a stamp of a build
// that wrote the pid alone.
func TestStampNamesThisProcess(t *testing.T) {
	h := Parse(Stamp())
	if h.PID != os.Getpid() || !h.This() || h.Elsewhere() || !h.Live() {
		t.Errorf("own stamp %q reads %+v: This %v, Elsewhere %v, Live %v", Stamp(), h, h.This(), h.Elsewhere(), h.Live())
	}
	if h := Parse([]byte("42\n")); h != (Holder{PID: 42}) {
		t.Errorf("a bare pid reads %+v, want pid 42 in no known namespace", h)
	}
	for _, b := range []string{"", "\n", "x", "-3", "0 pid:[1]"} {
		if h := Parse([]byte(b)); h != (Holder{}) {
			t.Errorf("stamp %q reads %+v, want nobody", b, h)
		}
	}
}
