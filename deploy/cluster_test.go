package deploy

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// TestClusterStartWaitsForRebalance runs deploy/cluster.sh start on the Kafka
// of TROUPE_TEST_KAFKA (three nodes sharing a SQLite log, a topic prefix and a
// group of their own) and checks that when start returns, status already shows
// the partitions of troupe.tasks shared: each node owns some, all together
// every one once. Before, start returned as soon as each node answered
// /healthz, while the first node to join still owned them all.
func TestClusterStartWaitsForRebalance(t *testing.T) {
	broker := serviceAddr(t, "TROUPE_TEST_KAFKA", "Kafka")
	for _, tool := range []string{"bash", "curl", "go", "setsid"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found", tool)
		}
	}
	if testing.Short() {
		t.Skip("builds cmd/node and starts three nodes")
	}
	base := freePortBase(t, 3)
	suffix := uniqueName(t, "")
	env := append(os.Environ(),
		"TROUPE_DEPLOY_RUN="+t.TempDir(),
		"TROUPE_KAFKA="+broker,
		"TROUPE_CLICKHOUSE=", // set but empty: the nodes share a SQLite log
		"TROUPE_KAFKA_TOPIC_PREFIX=cs"+suffix+".",
		"TROUPE_KAFKA_GROUP=cs"+suffix,
		"TROUPE_CLUSTER_HTTP_BASE="+strconv.Itoa(base),
		"TROUPE_CLUSTER_WAIT_SECONDS=120",
		"TROUPE_MODEL=offline",
	)
	script := func(ctx context.Context, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "bash", append([]string{"cluster.sh"}, args...)...)
		cmd.Env = env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.WaitDelay = 5 * time.Second
		err := cmd.Run()
		return out.String(), err
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		if out, err := script(ctx, "stop"); err != nil {
			t.Logf("cluster.sh stop: %v\n%s", err, out)
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := script(ctx, "start", "3"); err != nil {
		t.Fatalf("cluster.sh start: %v\n%s", err, out)
	}
	out, err := script(ctx, "status")
	if err != nil {
		t.Fatalf("cluster.sh status: %v\n%s", err, out)
	}
	owned := regexp.MustCompile(`(?m)^node\d+ running .*partitions owned: (\d+)$`).FindAllStringSubmatch(out, -1)
	if len(owned) != 3 {
		t.Fatalf("status lists %d running nodes, want 3:\n%s", len(owned), out)
	}
	sum := 0
	for _, m := range owned {
		n, _ := strconv.Atoi(m[1])
		if n == 0 {
			t.Fatalf("a node owns no partition right after start: the rebalance was not over:\n%s", out)
		}
		sum += n
	}
	if sum != 12 {
		t.Fatalf("the nodes own %d partitions between them, want 12:\n%s", sum, out)
	}
}

// freePortBase returns a port p such that p+1..p+n are free on 127.0.0.1 now.
func freePortBase(t *testing.T, n int) int {
	t.Helper()
	// Below the kernel's ephemeral range (32768 up by default): a port there that
	// is free now can be taken by any test's outgoing connection (a Kafka client's)
	// before the node binds it.
	lo, hi := 20000, 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		var first, last int
		if _, err := fmt.Sscan(string(b), &first, &last); err == nil && first > lo+n+1000 {
			hi = first
		}
	}
	for range 100 {
		base := lo + rand.IntN(hi-lo-n)
		free := true
		for i := 1; i <= n && free; i++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+i))
			if err != nil {
				free = false
				continue
			}
			l.Close()
		}
		if free {
			return base
		}
	}
	t.Fatal("no free port range")
	return 0
}
