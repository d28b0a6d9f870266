package nodeconfig

import (
	"testing"
	"time"
)

// shortDuration cuts zero units whole: 10m0s is 10m, not 1.
func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		10 * time.Minute: "10m", 720 * time.Hour: "720h", time.Hour + 30*time.Minute: "1h30m",
		time.Second: "1s", 100 * time.Millisecond: "100ms", 90 * time.Second: "1m30s", 20 * time.Hour: "20h",
	} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%s) = %q, want %q", d, got, want)
		}
	}
}
