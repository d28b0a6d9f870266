//go:build race

package node_test

// raceEnabled says the tests run under the race detector, whose instrumentation
// allocates: a test that counts allocations cannot hold there.
const raceEnabled = true
