package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestClusterRoleSplitIdlePastEveryTimeoutThenWork is the idle test of a cluster
// whose roles are split: n1 runs sessions only, n2 tools and models only, so each
// task's model and tool calls cross the bus (troupe.model.requests,
// troupe.tool.requests) and their answers come back on troupe.replies, which n1
// reads from the latest offset, without a group. Both idle past their session
// actors' idle timeout, the group's session timeout, the broker's idle timeout and
// the network's idle timer, which forgets or closes their idle connections. Then
// tasks come again: each completes once, in order, and no call is lost on the way,
// so that none waits for a request to be published again (--effect-reissue, whose
// reissues the node counts), which a lost answer would take.
func TestClusterRoleSplitIdlePastEveryTimeoutThenWork(t *testing.T) {
	kcat := clusterServices(t)
	dir := t.TempDir()
	env := newClusterEnv(t, dir)
	script, records, modelLog := oneRecordScript(t, dir)
	chProxy := startIdleProxy(t, env.clickhouse)
	broker := freeAddr(t)
	kafkaProxy := startIdleProxy(t, broker)
	if why := ownBroker(t, broker, kafkaProxy.Addr(), 5*time.Second); why == "" {
		env.brokers = kafkaProxy.Addr()
	} else {
		kafkaProxy = nil
		t.Logf("the nodes use the Kafka at %s, which closes idle connections when it will, with nothing forgetting them: %s", env.brokers, why)
	}
	nodeEnv := env
	nodeEnv.clickhouse = chProxy.Addr()
	// Reissue only after a minute, past the round's deadline: a lost answer fails
	// the test rather than being hidden by a request published again.
	flags := []string{"-v", "--idle-timeout", "2s", "--effect-reissue", "3m"}
	sessions := startClusterNode(t, nodeEnv, "n1", "sessions", script, records, modelLog, flags...)
	serving := startClusterNode(t, nodeEnv, "n2", "tools,models", script, records, modelLog, flags...)
	waitOwned(t, sessions)
	log := env.openLog(t)
	defer log.Close()

	prefix := fmt.Sprintf("idlerole-%d-", time.Now().UnixNano())
	inputs := map[string][]string{}
	var ids []string
	publish := func(kind string, n int, http bool) {
		var lines []string
		for i := range n {
			id := fmt.Sprintf("%s%s%d", prefix, kind, i)
			if len(inputs[id]) == 0 {
				ids = append(ids, id)
			}
			in := fmt.Sprintf("%s t%d", id, len(inputs[id]))
			inputs[id] = append(inputs[id], in)
			if http {
				[]*child{sessions, serving}[i%2].post(t, fmt.Sprintf(`{"input":%q,"session_id":%q}`, in, id))
			} else {
				lines = append(lines, fmt.Sprintf(`%s|{"input":%q}`, id, in))
			}
		}
		if len(lines) > 0 {
			kcatPublish(t, kcat, env, []string{"-K", "|"}, lines...)
		}
	}
	want := func() map[string]int {
		w := map[string]int{}
		for _, id := range ids {
			w[id] = len(inputs[id])
		}
		return w
	}

	publish("kcat-a", 4, false)
	publish("http-a", 4, true)
	if !waitTasksEnded(t, log, want(), 120*time.Second) {
		t.FailNow()
	}

	idleFrom := time.Now()
	for _, id := range ids {
		waitFor(t, 60*time.Second, "session "+id+" passivated", func() bool {
			for _, line := range strings.Split(sessions.stderr.String(), "\n") {
				if strings.Contains(line, `msg="session passivated"`) && strings.Contains(line+" ", " session="+id+" ") {
					return true
				}
			}
			return false
		})
	}
	time.Sleep(12*time.Second - time.Since(idleFrom))
	chProxy.expireIdle(3 * time.Second)
	kafkaExpired := 0
	if kafkaProxy != nil {
		kafkaExpired = kafkaProxy.expireIdle(3 * time.Second)
	}

	publish("kcat-a", 4, false)
	publish("kcat-b", 4, false)
	publish("http-a", 4, true)
	publish("http-b", 2, true)
	if !waitTasksEnded(t, log, want(), 90*time.Second) {
		t.Errorf("requests published again by n1: %d", sessions.gauge(t, "troupe_cluster_effect_requests_reissued_total"))
		t.FailNow()
	}
	total := 0
	for _, id := range ids {
		assertTasksInOrder(t, log, id, inputs[id])
		total += len(inputs[id])
	}
	assertEffectsOnce(t, records, modelLog, nil, nil, total)
	assertGapFree(t, log, ids)
	if n := sessions.gauge(t, "troupe_cluster_effect_requests_reissued_total"); n != 0 {
		t.Errorf("n1 published %d requests again: their answers were lost", n)
	}
	t.Logf("%d sessions, %d tasks, all completed once in order; ClickHouse connections forgotten %d, closed %d; idle Kafka connections forgotten or closed %d",
		len(ids), total, chProxy.forgotten.Load(), chProxy.closedIdle.Load(), kafkaExpired)
}
