package main

import (
	"os"
	"testing"
)

// replayChildEnv makes this test binary run as the replay command (see unprivilegedReplay).
const replayChildEnv = "TROUPE_REPLAY_CHILD"

// The tests choose their own logs and model: settings in the environment (a developer's, or
// those deploy/services.sh exports) must not redirect them.
func TestMain(m *testing.M) {
	for _, v := range []string{"TROUPE_KAFKA", "TROUPE_CLICKHOUSE", "TROUPE_CLICKHOUSE_DATABASE", "TROUPE_DATA"} {
		os.Unsetenv(v)
	}
	// Forks continue on the offline model, whatever keys the environment holds.
	os.Setenv("TROUPE_MODEL", "offline")
	if os.Getenv(replayChildEnv) == "1" {
		// This test binary, started by a test as the replay command (see unprivilegedReplay).
		ctx, stop := signalContext()
		code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}
