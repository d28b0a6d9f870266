package main

import (
	"os"
	"testing"
)

// The tests choose their own logs and model: settings in the environment (a developer's, or
// those deploy/services.sh exports) must not redirect them.
func TestMain(m *testing.M) {
	for _, v := range []string{"TROUPE_KAFKA", "TROUPE_CLICKHOUSE", "TROUPE_CLICKHOUSE_DATABASE", "TROUPE_DATA"} {
		os.Unsetenv(v)
	}
	// Forks continue on the offline model, whatever keys the environment holds.
	os.Setenv("TROUPE_MODEL", "offline")
	os.Exit(m.Run())
}
