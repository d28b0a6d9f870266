package main

import (
	"os"
	"testing"
)

// The tests choose their own logs: settings in the environment (a developer's, or
// those deploy/services.sh exports) must not redirect them.
func TestMain(m *testing.M) {
	for _, v := range []string{"TROUPE_KAFKA", "TROUPE_CLICKHOUSE", "TROUPE_CLICKHOUSE_DATABASE", "TROUPE_DATA", "TROUPE_MODEL"} {
		os.Unsetenv(v)
	}
	os.Exit(m.Run())
}
