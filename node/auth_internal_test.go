package node

import (
	"fmt"
	"testing"
	"time"
)

// Buckets left alone until they are full again are dropped: a node that saw a
// hundred thousand clients keeps the buckets of the recent ones, and a dropped
// client starts over with a full bucket, as it would have had.
func TestLimitersForgetIdleClients(t *testing.T) {
	l := newLimiters(10, 5) // full again after 0.5 s
	start := time.Unix(1_000_000, 0)
	for i := range 100_000 {
		now := start.Add(time.Duration(i) * 100 * time.Microsecond) // 10 s in all
		if _, ok := l.allow(fmt.Sprintf("ip:%d", i), now); !ok {
			t.Fatalf("client %d's first request was refused", i)
		}
	}
	// 0.5 s of clients is 5,000 buckets; sweeps run when the count doubles.
	if n := l.size(); n > 4*5000+minSweep {
		t.Fatalf("%d buckets held after 100,000 clients over 10 s, want at most about 20,000", n)
	}
	// A limited client is still limited: its bucket is not idle.
	now := start.Add(20 * time.Second)
	for range 5 {
		l.allow("busy", now)
	}
	if wait, ok := l.allow("busy", now); ok || wait <= 0 || wait > 100*time.Millisecond {
		t.Fatalf("past the burst: allowed %v, wait %v; want refused with a wait of at most 100 ms", ok, wait)
	}
}

// A node without tokens, for a request to a loopback address, serves the names
// of this host: localhost and the names under .localhost, the loopback names of
// /etc/hosts on RHEL and Fedora, IP addresses in any form a client sends (curl
// sends 127.1 as typed), names without a dot and the host's own names (Debian's
// FQDN, on 127.0.1.1); it refuses another DNS name, which a page of another site
// may point at 127.0.0.1 (DNS rebinding).
func TestReboundHostServesTheNamesOfThisHost(t *testing.T) {
	own := func() map[string]bool { return map[string]bool{"myhost": true, "myhost.example.org": true} }
	for _, host := range []string{"localhost", "localhost:8080", "LOCALHOST.", "app.localhost", "node",
		"localhost.localdomain", "LOCALHOST.LOCALDOMAIN.:8080", "localhost4.localdomain4", "localhost6.localdomain6",
		"127.0.0.1", "127.1", "127.1:8080", "127.0.1", "0x7f.1", "0x7f000001", "2130706433", "[::1]:8080", "192.0.2.7",
		"myhost.example.org", "MyHost.Example.Org.:8080"} {
		if reboundHost(host, own) {
			t.Errorf("Host %s was refused, want served", host)
		}
	}
	for _, host := range []string{"evil.example", "evil.example:8080", "127.0.0.1.nip.io", "localhost.evil.example", "localhost.localdomain.evil.example",
		"myhost.example.org.evil.example", "other.example.org", "1.2.3.4.5", "127.1.x", "0x7g.1", "1e100.net", "127..1"} {
		if !reboundHost(host, own) {
			t.Errorf("Host %s was served, want refused", host)
		}
	}
}
